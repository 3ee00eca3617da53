//! The `marketplace` command: serves the API (default) and offers operator tasks.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use marketplace::clock::Clock;
use marketplace::config::Settings;
use marketplace::demo::seed;
use marketplace::startup::Application;
use marketplace::store::Db;
use marketplace::{telemetry, workflows};

#[derive(Parser)]
#[command(name = "marketplace", version, about = "Expert marketplace backend")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Apply the database migrations and exit.
    Migrate,
    /// Create an active, verified administrator.
    CreateAdmin {
        #[arg(long)]
        email: String,
        #[arg(long)]
        username: String,
        #[arg(long)]
        password: String,
    },
    /// Fill the database with demo data (skips what already exists).
    SeedDemo,
    /// Invoices: `verify` walks every series' hash chain and exits 1 naming the first broken
    /// link.
    Invoices {
        #[command(subcommand)]
        action: InvoicesAction,
    },
    /// Run the payment processor sandbox on its own (protocol and controls on one port), so
    /// its ledger outlives the servers pointed at it with `PROCESSOR_API_BASE`. Keys from
    /// `PROCESSOR_SECRET_KEY` and `PROCESSOR_WEBHOOK_SECRET`.
    ProcessorSandbox {
        #[arg(long, default_value_t = 12111)]
        port: u16,
        /// Where to POST the signed webhook events (the service's
        /// `/api/payments/webhooks/processor`).
        #[arg(long)]
        webhook_url: Option<String>,
        /// How often events whose delivery failed are sent again, in milliseconds.
        #[arg(long, default_value_t = 500)]
        redeliver_ms: u64,
    },
}

#[derive(Subcommand)]
enum InvoicesAction {
    /// Check every issued invoice and credit note against its series' chain.
    Verify,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::from_env() {
        Ok(settings) => settings,
        Err(err) => {
            eprintln!("{err}");
            return ExitCode::from(2);
        }
    };
    let _log_writer = telemetry::init(settings.log_format);
    telemetry::log_panics();
    // The actix system runtime hosts the HTTP server and the actors' arbiters.
    let result =
        actix_web::rt::System::new().block_on(run(cli.command.unwrap_or(Command::Serve), settings));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command, settings: Settings) -> anyhow::Result<()> {
    match command {
        Command::Serve => {
            let app = Application::build(settings).await?;
            tracing::info!(port = app.port(), "serving");
            app.run_until_signalled().await?;
        }
        Command::Migrate => {
            Db::connect(&settings.database).await?;
            println!("migrations applied");
        }
        Command::CreateAdmin {
            email,
            username,
            password,
        } => {
            let db = Db::connect(&settings.database).await?;
            let id = workflows::accounts::create_admin(
                &db,
                &Clock::system(),
                settings.bcrypt_cost,
                &email,
                &username,
                &password,
            )
            .await?;
            println!("administrator {username} created with id {id}");
        }
        Command::SeedDemo => {
            let db = Db::connect(&settings.database).await?;
            let report = seed::seed_demo(&db, &Clock::system(), settings.bcrypt_cost).await?;
            println!("{report}");
        }
        Command::Invoices {
            action: InvoicesAction::Verify,
        } => {
            let db = Db::connect(&settings.database).await?;
            let checked = workflows::invoices::verify(&db).await?;
            match checked.broken {
                None => println!(
                    "invoice chains intact: {} series, {} documents",
                    checked.series, checked.documents
                ),
                Some((id, number, reason)) => {
                    anyhow::bail!("invoice chain broken at {number} (id {id}): {reason}")
                }
            }
        }
        Command::ProcessorSandbox {
            port,
            webhook_url,
            redeliver_ms,
        } => {
            use anyhow::Context as _;
            use marketplace::integrations::{
                processor::SandboxConfig, standins::processor::standalone,
            };
            let secret_key = settings
                .processor_secret_key
                .clone()
                .context("PROCESSOR_SECRET_KEY is required: the key the servers present")?;
            let webhook_secret = settings
                .processor_webhook_secret
                .clone()
                .context("PROCESSOR_WEBHOOK_SECRET is required: the key events are signed with")?;
            let listener = std::net::TcpListener::bind(("127.0.0.1", port))
                .with_context(|| format!("cannot bind 127.0.0.1:{port}"))?;
            let config = SandboxConfig::new(secret_key, webhook_secret, Clock::system());
            standalone::serve(
                config,
                listener,
                webhook_url,
                std::time::Duration::from_millis(redeliver_ms),
            )
            .await?;
        }
    }
    Ok(())
}
