//! `fencegate [serve] [OPTIONS]` and `fencegate check-config FILE`: see
//! `fencegate --help` and the README.

use std::io::Write;
use std::process::ExitCode;

use fencegate::gateway::cli::LogFormat;
use fencegate::gateway::config_file::{self, CheckError, LoadError};
use fencegate::gateway::{Config, Gateway};

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "check-config") {
        return check_config(&args);
    }
    let loaded = match config_file::load(args.clone()) {
        Ok(loaded) => loaded,
        Err(LoadError::Usage(error)) => return usage_error(error),
        Err(error) => return fail(error.into()),
    };
    init_logging(loaded.cli.log_format);
    for warning in &loaded.effective.warnings {
        tracing::warn!("{warning}");
    }
    let config = loaded.config;
    let shown = loaded.effective.to_json();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return fail(anyhow::anyhow!("cannot start the runtime: {error}")),
    };
    match runtime.block_on(serve(config, shown, args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(error),
    }
}

async fn serve(
    config: Config,
    shown: serde_json::Value,
    args: Vec<std::ffi::OsString>,
) -> anyhow::Result<()> {
    let max_connections = config.client.max_connections;
    let gateway = Gateway::start(config).await?;
    gateway.config_reloader().show(shown);
    let reloads = reload_on_sighup(&gateway, args);
    let watcher = tokio::spawn(
        gateway
            .config_reloader()
            .watch_credential_files(CREDENTIAL_FILES_LOOK_EVERY),
    );
    // Registered before the addresses are printed, as SIGHUP's handler
    // is: a SIGTERM sent as soon as they are must drain, not take
    // SIGTERM's default action (which ends the process without a drain).
    let shutdown = shutdown_signal();
    // After the start: a start that fails says so in one line, alone.
    raise_file_limit(max_connections);
    let data = gateway.data_addr();
    println!("data plane listening on {data}");
    println!("admin plane listening on {}", gateway.admin_addr());
    if gateway.is_embedded() {
        println!(
            "try: curl -i -X PUT -H 'X-Fencing-Token: 34' --data v2 http://{data}/demo/report \
             && curl -i -X PUT -H 'X-Fencing-Token: 33' --data v1 http://{data}/demo/report"
        );
    } else {
        println!(
            "forwarding to {}; try: curl -i -X PUT -H 'X-Fencing-Token: 1' --data hello http://{data}/demo/object",
            gateway.upstream()
        );
    }
    let _ = std::io::stdout().flush();
    shutdown.await;
    reloads.abort();
    watcher.abort();
    tracing::info!("shutting down: draining requests in flight");
    if !gateway.shutdown().await {
        tracing::warn!("some requests were still in flight at the shutdown timeout");
    }
    Ok(())
}

/// How often the credential files are read for changes: a change is in
/// force two to four seconds after it is written (two reads must agree).
/// Each look reads a few small files and parses them.
const CREDENTIAL_FILES_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// `SIGHUP` re-reads the TLS certificates (the served one, the one shown to
/// etcd) and the configuration (the command line's environment variables
/// and `--config` file, credential custody's tables): a new generation of
/// routes for new requests. A bad certificate keeps the old one, a
/// configuration that does not load or would change what a fence means
/// keeps the old configuration; each says why in one line.
fn reload_on_sighup(
    gateway: &Gateway,
    args: Vec<std::ffi::OsString>,
) -> tokio::task::JoinHandle<()> {
    let certs = gateway.tls_reloader();
    let config = gateway.config_reloader();
    // Registered now, before the addresses are printed: a SIGHUP sent as
    // soon as they are must reload, not take SIGHUP's default action
    // (which ends the process).
    #[cfg(unix)]
    let hangup = {
        use tokio::signal::unix::{signal, SignalKind};
        signal(SignalKind::hangup())
    };
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let Ok(mut hangup) = hangup else {
                return;
            };
            while hangup.recv().await.is_some() {
                if !certs.is_empty() {
                    match certs.reload() {
                        Ok(()) => tracing::info!("SIGHUP: TLS certificates reloaded"),
                        Err(error) => tracing::error!(
                            %error,
                            "SIGHUP: cannot reload the TLS certificate; the old one stays in use"
                        ),
                    }
                }
                reload_config(&config, &args).await;
            }
        }
        #[cfg(not(unix))]
        let _ = (certs, config, args);
    })
}

async fn reload_config(reloader: &fencegate::gateway::ConfigReloader, args: &[std::ffi::OsString]) {
    let loaded = match config_file::load(args.to_vec()) {
        Ok(loaded) => loaded,
        Err(error) => {
            let error = error.to_string().replace('\n', "; ");
            tracing::error!(
                "SIGHUP: the configuration does not load, the one in force stays: {error}"
            );
            return;
        }
    };
    let shown = loaded.effective.to_json();
    let routes = loaded.config.routes.len().max(1);
    match reloader.reload(loaded.config).await {
        Ok(generation) => {
            reloader.show(shown);
            tracing::info!(generation, routes, "SIGHUP: configuration reloaded");
            // As at start: what is legal but probably not meant.
            for warning in &loaded.effective.warnings {
                tracing::warn!("{warning}");
            }
        }
        Err(error) => {
            tracing::error!("SIGHUP: configuration not reloaded, the one in force stays: {error}")
        }
    }
}

/// Completes at the first `SIGTERM` or `SIGINT` (Ctrl-C). Both handlers
/// are registered when this is called, not when it is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    async move {
        #[cfg(unix)]
        match signals {
            (Ok(mut term), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            _ => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Raises the soft limit on open files to the hard limit, as far as the
/// system allows: each client connection takes one descriptor, each
/// upstream connection another. At the limit, accepting fails with EMFILE:
/// the accept loop logs it and retries every 500 ms while the waiting
/// connections queue in the kernel's backlog, and requests already
/// accepted go on.
fn raise_file_limit(max_connections: usize) {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        tracing::info!(from = soft, to = hard, "raised the open files limit");
        hard
    } else {
        soft
    };
    // One descriptor per client connection, plus room for the store, the
    // admin plane and the logs (upstream connections need more: the README
    // recommends twice --max-connections).
    let needed = u64::try_from(max_connections)
        .unwrap_or(u64::MAX)
        .saturating_add(64);
    if limit < needed {
        tracing::warn!(
            limit,
            max_connections,
            "the open files limit is below --max-connections: at the limit new connections wait in the kernel's queue until descriptors free up"
        );
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FENCEGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// `--help` and `--version` print as usual; any other parse error is one line.
fn usage_error(error: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            ExitCode::SUCCESS
        }
        _ => {
            let text = error.to_string();
            let line = text.lines().next().unwrap_or("invalid arguments");
            let line = line.strip_prefix("error: ").unwrap_or(line);
            eprintln!("fencegate: {line} (see fencegate --help)");
            ExitCode::from(2)
        }
    }
}

/// `fencegate check-config FILE [OPTIONS]`: every problem of the file (and
/// of the configuration it makes with the environment and the options) at
/// once, one per line, exit 1; else the effective configuration with each
/// value's origin and secrets masked, exit 0.
fn check_config(args: &[std::ffi::OsString]) -> ExitCode {
    let [program, _, file, options @ ..] = args else {
        eprintln!("usage: fencegate check-config FILE [OPTIONS]");
        return ExitCode::from(2);
    };
    let mut argv = vec![program.clone(), "--config".into(), file.clone()];
    argv.extend(options.iter().cloned());
    match config_file::check(argv) {
        Ok(loaded) => {
            print!("{}", loaded.effective);
            ExitCode::SUCCESS
        }
        Err(CheckError::Load(LoadError::Usage(error))) => usage_error(error),
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn fail(error: anyhow::Error) -> ExitCode {
    eprintln!("fencegate: {error}");
    ExitCode::FAILURE
}
