//! `oncelog-broker --data DIR --listen 127.0.0.1:9092`

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use oncelog_broker::{Args, Server};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let args = Args::parse();
    // Logs go to stderr; stdout carries only the two start-up lines scripts read.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let config = match args.into_config() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("oncelog-broker: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("oncelog-broker: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let server = match Server::bind(config).await {
            Ok(server) => server,
            Err(e) => {
                tracing::error!(error = %e, "cannot start");
                return ExitCode::FAILURE;
            }
        };
        let addr = match server.local_addr() {
            Ok(addr) => addr,
            Err(e) => {
                tracing::error!(error = %e, "no local address");
                return ExitCode::FAILURE;
            }
        };
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "data directory {}", server.data_dir().display());
        let _ = writeln!(stdout, "listening on {addr}");
        let _ = stdout.flush();
        drop(stdout);
        tracing::info!(%addr, data = %server.data_dir().display(), "broker started");
        match server.run(shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "unclean shutdown");
                ExitCode::FAILURE
            }
        }
    })
}

/// SIGTERM (a service manager, `kill`) or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the broker");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
