//! The storage the demos write to (fencegate's embedded object store, served
//! unfenced on its own port, with a tap that draws what reaches it) and a
//! real fencegate in this process in front of it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::Response;
use axum::Router;
use fencegate::gateway::embedded::{self, ObjectStore};
use fencegate::gateway::upstream::Upstream;
use fencegate::gateway::{Config, Gateway, StateKind};
use http::{Method, StatusCode};
use http_body_util::BodyExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use super::client::{http, request_label, shorten};
use super::{Lane, Result, Timeline, TOKEN_HEADER};

/// fencegate's embedded object store (in memory), served unfenced on its own
/// loopback port, with a tap that draws what reaches it; stops on drop.
pub struct Storage {
    /// Where it listens.
    pub addr: SocketAddr,
    tap: Tap,
    task: JoinHandle<std::io::Result<()>>,
}

/// The store, and where the tap draws: on the `storage` lane, with an arrow
/// from `from` (the gateway) unless the client drew its own.
#[derive(Clone)]
struct Tap {
    objects: Router,
    timeline: Timeline,
    lane: Lane,
    from: Option<Lane>,
}

impl Tap {
    /// The object at `path`, read inside the store (not drawn).
    async fn peek(&self, path: &str) -> Result<Option<String>> {
        let request = http::Request::get(path).body(Body::empty())?;
        let response = self.objects.clone().oneshot(request).await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

impl Storage {
    /// Starts the store on `127.0.0.1:0`, drawn on the timeline's `storage`
    /// lane; requests arrive from `from` (the gateway), or from clients that
    /// drew their own arrows.
    pub async fn start(tl: &Timeline, from: Option<Lane>) -> Result<Storage> {
        let objects = embedded::router(ObjectStore::in_memory());
        let (timeline, lane) = (tl.clone(), tl.lane("storage"));
        let tap = Tap {
            objects,
            timeline,
            lane,
            from,
        };
        let app = tap
            .objects
            .clone()
            .layer(from_fn_with_state(tap.clone(), record));
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Storage { addr, tap, task })
    }

    /// The object at `path`, read inside the store (not drawn).
    pub async fn peek(&self, path: &str) -> Result<Option<String>> {
        self.tap.peek(path).await
    }

    /// Stores `value` at `path` inside the store (not drawn): the state
    /// before the scenario starts.
    pub async fn seed(&self, path: &str, value: &str) -> Result<()> {
        let request = http::Request::put(path).body(Body::from(value.to_owned()))?;
        let status = self.tap.objects.clone().oneshot(request).await?.status();
        match status.is_success() {
            true => Ok(()),
            false => Err(format!("seeding {path}: {status}").into()),
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A stored value for display: quoted, or `nothing`.
pub fn shown(value: &Option<String>) -> String {
    match value {
        Some(value) => format!("{:?}", shorten(value, 20)),
        None => "nothing".to_owned(),
    }
}

/// The tap: draws the request (if it came from the gateway) and what the
/// store did with it.
async fn record(State(tap): State<Tap>, request: Request, next: Next) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let token = request.headers().get(TOKEN_HEADER);
    let token = token.and_then(|v| v.to_str().ok()).map(str::to_owned);
    if let Some(from) = tap.from {
        let label = request_label(&method, token.as_deref(), None);
        tap.timeline.msg(from, tap.lane, label);
    }
    let before = tap.peek(&path).await.ok().flatten();
    let response = next.run(request).await;
    let after = tap.peek(&path).await.ok().flatten();
    let (status, before, after) = (response.status(), shown(&before), shown(&after));
    let text = match method {
        Method::GET | Method::HEAD => format!("read {after}"),
        _ if status.is_success() => format!("stored {after} (was {before})"),
        _ => format!("{method} failed: {}", status.as_u16()),
    };
    tap.timeline.note(tap.lane, text);
    response
}

/// A real fencegate in this process on `127.0.0.1:0` (data and admin
/// planes), fences in memory, in front of `upstream`; admin writes enabled
/// with the bearer token in `admin_token_file`.
pub async fn start_gateway(
    upstream: SocketAddr,
    admin_token_file: Option<PathBuf>,
) -> Result<Gateway> {
    let config = Config {
        listen: "127.0.0.1:0".parse()?,
        admin_listen: "127.0.0.1:0".parse()?,
        state: StateKind::Memory,
        upstream: Some(Upstream::from_addr(upstream)?),
        shutdown_timeout: Duration::from_secs(2),
        admin_token_file,
        ..Config::default()
    };
    Ok(Gateway::start(config).await?)
}

/// The admin plane's path for the fence of `key`: `/fences/{key}`, the key
/// percent-encoded.
pub fn fence_path(key: &str) -> String {
    let encoded = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC);
    format!("/fences/{encoded}")
}

/// A run's timeline: the lanes of `actors`, then fencegate's (a fenced run)
/// and the storage's.
pub fn run_timeline(actors: &[&str], fenced: bool) -> Timeline {
    let backend: &[&str] = match fenced {
        true => &["fencegate", "storage"],
        false => &["storage"],
    };
    Timeline::new(&[actors, backend].concat())
}

/// Starts a run's storage and, for a fenced run, fencegate in front of it
/// (the timeline's `fencegate` lane); also where requests are answered: the
/// gateway's data plane, or the storage itself.
pub async fn start_backend(
    tl: &Timeline,
    fenced: bool,
) -> Result<(Storage, Option<Gateway>, SocketAddr, Lane)> {
    let gateway_lane = tl.find_lane("fencegate").filter(|_| fenced);
    let storage = Storage::start(tl, gateway_lane).await?;
    let Some(lane) = gateway_lane else {
        let (addr, lane) = (storage.addr, tl.lane("storage"));
        return Ok((storage, None, addr, lane));
    };
    let gateway = start_gateway(storage.addr, None).await?;
    let addr = gateway.data_addr();
    Ok((storage, Some(gateway), addr, lane))
}

/// Ends a run: the storage's final value of `key` and, through fencegate,
/// the fence's highest token for it (asked of the admin plane); then stops
/// the gateway and the storage.
pub async fn end_run(
    storage: Storage,
    gateway: Option<Gateway>,
    key: &str,
) -> Result<(Option<String>, Option<u64>)> {
    let stored = storage.peek(key).await?;
    let Some(gateway) = gateway else {
        return Ok((stored, None));
    };
    let (admin, path) = (gateway.admin_addr(), fence_path(key));
    let reply = http(admin, Method::GET, &path, None, None).await?;
    let highest = match reply.status {
        StatusCode::NOT_FOUND => None,
        _ => serde_json::from_str::<serde_json::Value>(&reply.body)?["highest"].as_u64(),
    };
    gateway.shutdown().await;
    Ok((stored, highest))
}
