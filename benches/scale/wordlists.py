"""Word lists for the scale seeder: real names, real skills, real English and Spanish tech and
business words (some Spanish ones with accents), so that searches such as `kubernetes`,
`data` or `garcia` hit a realistic share of rows. Plain data, no logic."""

FIRST_NAMES = """
María José Antonio Manuel Francisco David Juan Javier Daniel Carlos Jesús Alejandro Miguel
Rafael Pablo Sergio Fernando Jorge Luis Alberto Álvaro Adrián Diego Raúl Iván Rubén Óscar
Andrés Ramón Enrique Vicente Joaquín Santiago Víctor Mario Ignacio Roberto Marcos Hugo
Carmen Ana Isabel Laura Cristina Marta Lucía Elena Sara Paula Raquel Beatriz Rosa Silvia
Patricia Andrea Irene Nuria Mónica Alicia Sofía Claudia Inés Noelia Verónica Julia Eva
Pilar Teresa Rocío Lorena Natalia Ángela Begoña Ainhoa Itziar Nerea Aitor Iker Jordi Núria
James John Robert Michael William Richard Joseph Thomas Charles Christopher Matthew Anthony
Mark Steven Paul Andrew Joshua Kevin Brian George Edward Ryan Jacob Gary Nicholas Eric
Mary Patricia Jennifer Linda Elizabeth Barbara Susan Jessica Sarah Karen Nancy Lisa Betty
Margaret Sandra Ashley Emily Donna Michelle Carol Amanda Melissa Deborah Stephanie Rebecca
Sharon Laura Cynthia Kathleen Amy Angela Helen Anna Brenda Emma Olivia Sophie Chloe Grace
""".split()

LAST_NAMES = """
García Garcia Rodríguez Rodriguez González Gonzalez Fernández Fernandez López Lopez Martínez
Martinez Sánchez Sanchez Pérez Perez Gómez Gomez Martín Martin Jiménez Jimenez Ruiz Hernández
Díaz Moreno Muñoz Álvarez Romero Alonso Gutiérrez Navarro Torres Domínguez Vázquez Ramos Gil
Ramírez Serrano Blanco Molina Morales Suárez Ortega Delgado Castro Ortiz Rubio Marín Sanz
Núñez Iglesias Medina Garrido Cortés Castillo Santos Lozano Guerrero Cano Prieto Méndez Cruz
Calvo Gallego Vidal León Márquez Herrera Peña Flores Cabrera Campos Vega Fuentes Carrasco
Diez Caballero Reyes Nieto Aguilar Pascual Santana Herrero Lorenzo Montero Hidalgo Giménez
Ibáñez Ferrer Durán Santiago Benítez Mora Vicente Vargas Arias Carmona Crespo Román Pastor
Smith Johnson Williams Brown Jones Miller Davis Wilson Anderson Taylor Thomas Moore Jackson
White Harris Clark Lewis Robinson Walker Young Allen King Wright Scott Hill Green Adams Baker
Nelson Carter Mitchell Roberts Turner Phillips Campbell Parker Evans Edwards Collins Stewart
Murphy Cook Rogers Morgan Cooper Peterson Reed Bailey Bell Kelly Howard Ward Cox Richardson
""".split()

EMAIL_DOMAINS = """
gmail.com outlook.com yahoo.es hotmail.com icloud.com protonmail.com telefonica.net gmx.es
yahoo.com live.com mail.com fastmail.com
""".split()

COMPANY_WORDS = """
Tecnologías Soluciones Consultores Digital Sistemas Innovación Software Datos Analytics Labs
Cloud Networks Partners Group Ventures Solutions Systems Studio Works Logística Energía
Ingeniería Servicios Global Ibérica Atlántica Mediterránea Norte Sur Levante Castilla Andalucía
Nexus Quantum Vertex Apex Nova Orbit Pixel Vector Matrix Fusion Horizon Summit Atlas Aurora
""".split()

CITIES = """
Madrid Barcelona Valencia Sevilla Zaragoza Málaga Murcia Palma Bilbao Alicante Córdoba
Valladolid Vigo Gijón Granada Vitoria Oviedo Pamplona Santander Salamanca Cádiz León Burgos
London Manchester Dublin Lisbon Berlin Paris Amsterdam Remote
""".split()

PROVINCES = """
Madrid Barcelona Valencia Sevilla Zaragoza Málaga Murcia Baleares Bizkaia Alicante Córdoba
Valladolid Pontevedra Asturias Granada Álava Navarra Cantabria Salamanca Cádiz León Burgos
""".split()

INDUSTRIES = """
fintech retail healthcare logistics energy education insurance banking telecom media
manufacturing tourism automotive agritech legaltech proptech gaming ecommerce
""".split()

# Skills by category: (name, category) pairs; the slug is derived (lower case,
# non-alphanumerics to '-').
SKILL_TEXT = {
    "languages": ["Python", "Java", "JavaScript", "TypeScript", "Go", "Rust", "C", "C++", "C#",
                  "Ruby", "PHP", "Kotlin", "Swift", "Scala", "Elixir", "Erlang", "Haskell",
                  "Clojure", "R", "Julia", "Perl", "Lua", "Dart", "Objective-C", "Fortran",
                  "COBOL", "Bash", "PowerShell", "Groovy", "F#", "OCaml", "Zig", "Solidity",
                  "MATLAB", "SAS", "VBA"],
    "frontend": ["React", "Angular", "Vue.js", "Svelte", "Next.js", "Nuxt.js", "Ember.js",
                 "jQuery", "Redux", "HTML", "CSS", "Sass", "Tailwind CSS", "Bootstrap",
                 "Webpack", "Vite", "Storybook", "Three.js", "D3.js", "WebGL", "Gatsby",
                 "Remix", "Astro", "Alpine.js", "Material UI", "Chakra UI"],
    "backend": ["Django", "Flask", "FastAPI", "Spring Boot", "Ruby on Rails", "Laravel",
                "Symfony", "Express.js", "NestJS", "ASP.NET", "Phoenix", "Actix", "Axum",
                "Gin", "Fiber", "Quarkus", "Micronaut", "Node.js", "Deno", "GraphQL", "gRPC",
                "REST APIs", "WebSockets", "Celery", "RabbitMQ", "Kafka", "NATS", "ZeroMQ"],
    "data": ["SQL", "PostgreSQL", "MySQL", "MariaDB", "SQLite", "Oracle", "SQL Server",
             "MongoDB", "Redis", "Cassandra", "Elasticsearch", "OpenSearch", "DynamoDB",
             "Neo4j", "ClickHouse", "Snowflake", "BigQuery", "Redshift", "Databricks",
             "Apache Spark", "Hadoop", "Airflow", "dbt", "Pandas", "NumPy", "Polars",
             "Data Engineering", "Data Analysis", "Data Visualization", "ETL",
             "Data Warehousing", "Power BI", "Tableau", "Looker", "Metabase", "Superset",
             "Excel"],
    "ai": ["Machine Learning", "Deep Learning", "TensorFlow", "PyTorch", "Keras",
           "scikit-learn", "XGBoost", "LightGBM", "NLP", "Computer Vision", "LLM", "LangChain",
           "Hugging Face", "OpenCV", "MLOps", "MLflow", "Kubeflow", "Reinforcement Learning",
           "Time Series Forecasting", "Recommender Systems", "Prompt Engineering", "RAG",
           "Statistics"],
    "devops": ["Kubernetes", "Docker", "Helm", "Terraform", "Pulumi", "Ansible", "Chef",
               "Puppet", "Jenkins", "GitLab CI", "GitHub Actions", "CircleCI", "Argo CD",
               "Flux", "Prometheus", "Grafana", "Datadog", "New Relic", "ELK", "Istio",
               "Linkerd", "Envoy", "Nginx", "HAProxy", "Linux", "Site Reliability Engineering",
               "Vault", "Consul", "Nomad", "Packer", "OpenShift"],
    "cloud": ["AWS", "Azure", "Google Cloud", "AWS Lambda", "EC2", "S3", "CloudFormation",
              "Azure DevOps", "Cloud Run", "Firebase", "Heroku", "DigitalOcean", "Cloudflare",
              "Serverless", "OpenStack"],
    "mobile": ["Android", "iOS", "React Native", "Flutter", "SwiftUI", "Jetpack Compose",
               "Xamarin", "Ionic", "Kotlin Multiplatform"],
    "design": ["Figma", "Sketch", "Adobe XD", "Photoshop", "Illustrator", "InDesign",
               "After Effects", "Premiere Pro", "Blender", "UX Design", "UI Design",
               "User Research", "Prototyping", "Wireframing", "Design Systems", "Branding",
               "Motion Design", "Accessibility"],
    "security": ["Cybersecurity", "Penetration Testing", "OWASP", "SIEM", "SOC", "ISO 27001",
                 "GDPR", "OAuth", "Identity Management", "Cryptography", "Threat Modeling",
                 "Incident Response"],
    "business": ["Project Management", "Scrum", "Agile", "Kanban", "Product Management",
                 "Business Analysis", "Digital Marketing", "SEO", "SEM", "Google Ads",
                 "Content Marketing", "Copywriting", "Salesforce", "HubSpot", "SAP",
                 "SAP S/4HANA", "Odoo", "Microsoft Dynamics", "ERP", "CRM",
                 "Financial Modeling", "Accounting", "Technical Writing", "Translation",
                 "Customer Success", "E-commerce", "Shopify", "WooCommerce", "Magento",
                 "WordPress", "Drupal", "Growth Hacking"],
    "testing": ["QA Automation", "Selenium", "Cypress", "Playwright", "Jest", "pytest", "JUnit",
                "Appium", "Performance Testing", "JMeter", "k6", "Test Strategy"],
    "other": ["Blockchain", "Ethereum", "Web3", "IoT", "Embedded Systems", "Arduino",
              "Raspberry Pi", "Robotics", "Unity", "Unreal Engine", "Game Development", "AR",
              "VR", "Networking", "Cisco", "VMware", "Microservices", "Event Sourcing",
              "Domain-Driven Design", "System Design", "Software Architecture"],
}
SKILLS = [(name, cat) for cat, names in SKILL_TEXT.items() for name in names]

# Popular skills, drawn far more often than the rest (a long tail, as on real marketplaces).
POPULAR_SKILLS = ["Python", "JavaScript", "React", "SQL", "AWS", "Docker", "Kubernetes",
                  "Java", "TypeScript", "Node.js", "Django", "PostgreSQL", "Figma",
                  "Data Analysis", "Machine Learning", "Go", "Terraform", "Angular",
                  "Power BI", "SEO"]

TECH_WORDS = """
data platform pipeline dashboard api backend frontend microservices migration cloud cluster
kubernetes docker terraform analytics warehouse lake model training inference chatbot
integration payments checkout mobile app website redesign ecommerce marketplace crm erp
automation testing monitoring observability security audit compliance gdpr performance
scalability database postgres mysql mongodb redis search recommendation forecasting
reporting etl streaming kafka spark airflow dbt bigquery snowflake python django react
angular vue typescript node java spring golang rust ios android flutter figma prototype
branding seo campaign content landing onboarding authentication sso oauth infrastructure
devops ci cd deployment serverless lambda aws azure gcp network firewall backup recovery
""".split()

SPANISH_WORDS = """
diseño análisis migración desarrollo plataforma aplicación gestión optimización integración
automatización implantación consultoría auditoría seguridad rendimiento escalabilidad
infraestructura despliegue mantenimiento soporte formación documentación arquitectura
estrategia transformación digital negocio clientes ventas facturación contabilidad nóminas
logística almacén inventario pedidos envíos proveedores tienda catálogo búsqueda informes
métricas cuadro mando predicción clasificación recomendación personalización experiencia
usuario interfaz móvil web servidor base datos copias nube red monitorización pruebas
calidad revisión código refactorización módulo servicio panel administración pasarela pago
campaña posicionamiento contenidos marca identidad visual prototipo investigación producto
""".split()

BUSINESS_WORDS = """
project delivery roadmap stakeholder requirements scope milestone budget deadline team
quality support maintenance proposal strategy growth customer revenue operations process
workflow review feedback launch release sprint backlog estimate contract invoice report
""".split()

TITLE_ACTIONS_EN = ["Build", "Migrate", "Design", "Optimize", "Audit", "Automate",
                    "Integrate", "Scale", "Refactor", "Launch", "Maintain", "Redesign",
                    "Implement", "Deploy", "Modernize", "Secure", "Monitor", "Prototype"]
TITLE_ACTIONS_ES = ["Desarrollo de", "Migración de", "Diseño de", "Optimización de",
                    "Auditoría de", "Automatización de", "Integración de", "Implantación de",
                    "Rediseño de", "Mantenimiento de", "Análisis de", "Consultoría para",
                    "Despliegue de", "Modernización de"]
TITLE_OBJECTS = ["data platform", "data pipeline", "analytics dashboard", "REST API",
                 "e-commerce site", "mobile app", "CRM integration", "payment gateway",
                 "kubernetes cluster", "CI/CD pipeline", "data warehouse", "ML model",
                 "recommendation engine", "search service", "landing page", "design system",
                 "cloud infrastructure", "monitoring stack", "ERP rollout", "chatbot",
                 "plataforma de datos", "tienda online", "aplicación móvil", "cuadro de mando",
                 "infraestructura cloud", "pasarela de pago", "sistema de facturación",
                 "base de datos", "portal de clientes", "análisis de datos",
                 "migración a kubernetes", "identidad visual", "campaña SEO"]

NOTIFICATION_TYPES = [
    ("new_application", "Nueva propuesta", "Has recibido una nueva propuesta para tu proyecto"),
    ("application_accepted", "Propuesta aceptada", "Tu propuesta ha sido aceptada"),
    ("application_rejected", "Propuesta no seleccionada", "Tu propuesta no ha sido seleccionada"),
    ("payment_held", "Pago en custodia", "El pago del hito está en custodia"),
    ("payment_released", "Pago liberado", "El pago del hito ha sido liberado"),
    ("milestone_submitted", "Entrega recibida", "El experto ha enviado una entrega"),
    ("milestone_approved", "Entrega aprobada", "La empresa ha aprobado tu entrega"),
    ("new_message", "Nuevo mensaje", "Tienes un nuevo mensaje en el chat del proyecto"),
    ("project_published", "Proyecto publicado", "Tu proyecto ha sido publicado"),
    ("review_received", "Nueva reseña", "Has recibido una nueva reseña"),
    ("EXPERT_PAYOUT_PAID", "Transferencia realizada", "Hemos transferido tu pago"),
    ("dispute_opened", "Disputa abierta", "Se ha abierto una disputa en el proyecto"),
]

CHAT_PHRASES = [
    "Hola, ¿cómo va el avance del hito?", "Te paso el enlace al repositorio",
    "I pushed the fix to the staging branch", "Can we schedule a call tomorrow?",
    "He revisado el diseño, me parece bien", "The data pipeline is running again",
    "Necesitamos revisar la migración de la base de datos", "Looks good to me, thanks!",
    "¿Podrías subir la documentación actualizada?", "Deploy done, please check kubernetes logs",
    "Gracias, lo reviso esta tarde", "The dashboard now loads in under a second",
    "Queda pendiente la integración con la pasarela de pago", "Sent the invoice for milestone 2",
]

REVIEW_COMMENTS = [
    "Excelente profesional, muy recomendable", "Great communication and on-time delivery",
    "Trabajo de gran calidad, repetiría", "Solid work on the data platform",
    "Buen análisis y documentación clara", "Delivered the kubernetes migration flawlessly",
    "Muy buena comunicación durante todo el proyecto", "Good but needed some revisions",
    "Cumplió los plazos y el presupuesto", "Knows Python and SQL inside out",
]
