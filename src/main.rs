//! The `marketplace` command: serves the API (default) and offers operator tasks.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

use marketplace::clock::Clock;
use marketplace::config::Settings;
use marketplace::startup::Application;
use marketplace::store::Db;
use marketplace::workflows::seed;
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
            app.run_until_stopped().await?;
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
    }
    Ok(())
}
