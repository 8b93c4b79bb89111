//! The `tracker` binary: parse, run, exit code. The stages are in the
//! library beside it (`src/lib.rs`).

use std::process::ExitCode;

use clap::Parser;
use tracker::cli::{load_config, Cli};
use tracker::config::{default_config_file, Config};
use tracker::start;

fn main() -> ExitCode {
    // Before any secret is read: no other process of this user may read
    // this one's memory.
    if let Err(e) = start::privileges::undumpable() {
        eprintln!("tracker: {e}");
        return ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    if cli.print_config {
        print!("{}", default_config_file());
        return ExitCode::SUCCESS;
    }
    let config = match load_config(&cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("tracker: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(&config) {
        eprintln!("tracker: {e}");
        return ExitCode::from(2);
    }
    // A bad list is the user's to fix, like a bad config key: exit 2.
    let access = match start::load_access_list(&config) {
        Ok(access) => access,
        Err(e) => {
            eprintln!("tracker: `access.file`: {e}");
            return ExitCode::from(2);
        }
    };
    // Before any worker starts: contained panics are logged sparingly.
    tracker_runtime::contain::install_panic_hook();
    match start::run(config, access, cli.take_over) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, plainly, whatever the log level: the reason it stopped.
            eprintln!("tracker: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &Config) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.is_empty() => {
            EnvFilter::try_new(&text).map_err(|e| format!("RUST_LOG: {e}"))?
        }
        _ => EnvFilter::try_new(&config.log.level).map_err(|e| format!("`log.level`: {e}"))?,
    };
    // Colour codes are for a person at a terminal: in the journal, a file or
    // a pipe they are noise. NO_COLOR set and not empty turns them off even
    // there (no-color.org).
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !no_color)
        .init();
    Ok(())
}
