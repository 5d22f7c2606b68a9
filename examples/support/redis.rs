//! Redis as the lock service of the `redis_lock`, `redlock` and `torture`
//! demos:
//!
//! - [`RedisServer`]: a real `redis-server` on loopback, on a free port, with
//!   a temporary dir and no persistence; killed on drop and on Ctrl-C.
//! - [`LockClient`]: the seeds' recipes. One instance: `SET lock owner NX PX
//!   ttl` and, in the same Lua script, `INCR` of a token counter, so the token
//!   comes with the grant. Redlock: the same script on N independent
//!   instances in turn, a majority within the validity time (minus a clock
//!   drift allowance), and a token derived from the instances' counters (see
//!   [`LockClient`] for exactly how, and what it guarantees). Release is the
//!   compare-and-delete script, on every instance.
//! - [`Event`]: what a worker process reports, one JSON line each, stamped
//!   with its wall clock, so that the parent can draw it on a [`Timeline`]
//!   in the order it happened.
//! - [`PauseDemo`]: the two-worker scenario both lock demos run: worker 1
//!   takes the lock, checks its lease, and is frozen with SIGSTOP while it
//!   prepares its write, past its lease; worker 2 takes the lock and writes;
//!   worker 1 gets SIGCONT and writes.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, FromRedisValue, Script};
use anyhow::{anyhow, bail, Context, Result};
use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

use super::process::{self, Server, Worker};
use super::{
    direct_then_fenced, end_run, request_label, show_run, start_gateway, Lane, Reply, Route, Shown,
    Storage, Timeline,
};

// ---------------------------------------------------------------------------
// Servers
// ---------------------------------------------------------------------------

/// The server binary (installed by `scripts/install-deps.sh`).
pub const REDIS_SERVER: &str = "redis-server";

/// The key that is the lock.
pub const LOCK_KEY: &str = "fencegate-demo:lock";
/// The counter the fencing tokens come from (on each instance).
pub const TOKEN_KEY: &str = "fencegate-demo:lock:token";

/// A `redis-server` process on `127.0.0.1`, a free port, a temporary dir,
/// no persistence (`--save "" --appendonly no`). Killed on drop.
pub struct RedisServer {
    /// Its name in the demo (`redis`, `r1`, ...).
    pub name: String,
    /// Where it listens.
    pub addr: SocketAddr,
    server: Server,
}

impl RedisServer {
    /// Starts one and waits until it answers. Exits 2 with one line naming
    /// the install script if `redis-server` is not installed.
    pub fn start(name: &str) -> Result<RedisServer> {
        let binary = process::require_binary(REDIS_SERVER);
        let dir = process::temp_dir("fencegate-redis-", None)?;
        let port = process::free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut command = Command::new(binary);
        command
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path());
        let mut server = Server::start(name, command, dir)?;
        server.wait_ready(addr, Duration::from_secs(10))?;
        // Make sure the port is answered by the process we started (the free
        // port could have been taken by someone else in between).
        let mut con = sync_connect(addr)?;
        let info: String = ::redis::cmd("INFO").arg("server").query(&mut con)?;
        let pid = info
            .lines()
            .find_map(|line| line.strip_prefix("process_id:"))
            .and_then(|pid| pid.trim().parse::<u32>().ok());
        if pid != Some(server.pid()) {
            bail!(
                "{addr} is answered by another redis (pid {pid:?}), not the one started ({})",
                server.pid()
            );
        }
        Ok(RedisServer {
            name: name.to_owned(),
            addr,
            server,
        })
    }

    /// Starts `n` independent instances named `r1`, `r2`, ...
    pub fn start_many(n: usize) -> Result<Vec<RedisServer>> {
        (1..=n)
            .map(|i| RedisServer::start(&format!("r{i}")))
            .collect()
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// Empties the instance (FLUSHALL): no lock, token counter back to 0.
    pub fn flush(&self) -> Result<()> {
        let mut con = sync_connect(self.addr)?;
        ::redis::cmd("FLUSHALL").query::<()>(&mut con)?;
        Ok(())
    }

    /// Who holds the lock on this instance (the owner value), if anyone.
    pub fn holder(&self) -> Result<Option<String>> {
        let mut con = sync_connect(self.addr)?;
        Ok(::redis::cmd("GET").arg(LOCK_KEY).query(&mut con)?)
    }
}

/// `redis://addr/`.
pub fn url(addr: SocketAddr) -> String {
    format!("redis://{addr}/")
}

fn sync_connect(addr: SocketAddr) -> Result<::redis::Connection> {
    let client = Client::open(url(addr))?;
    let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
    con.set_read_timeout(Some(Duration::from_secs(2)))?;
    con.set_write_timeout(Some(Duration::from_secs(2)))?;
    Ok(con)
}

/// The addresses as one command-line value (`a,b,c`).
pub fn addr_list(servers: &[RedisServer]) -> String {
    servers
        .iter()
        .map(|s| s.addr.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------------------
// Lock clients
// ---------------------------------------------------------------------------

/// Take the lock and, in the same atomic script, a token: `SET lock owner NX
/// PX ttl`; if it was set, `INCR` the token counter. Answers `{1, token, ""}`
/// on a grant, `{0, ms left, holder}` when the lock is held.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, redis.call('INCR', KEYS[2]), ''}
end
return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1])}
",
    )
});

/// Release: delete the lock only if it still holds our owner value (a lease
/// that ran out may have been granted to someone else since).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Redlock's second step (ours, for the token): while this instance still
/// holds our lock key, raise its token counter to at least the token.
/// Answers 1 if raised (or already high enough) under our lock, 0 if our key
/// is gone.
static RAISE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
",
    )
});

/// Which lock service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// One redis-server.
    Redis,
    /// Redlock over several independent redis-servers.
    Redlock,
}

impl Provider {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Redis => "redis",
            Provider::Redlock => "redlock",
        }
    }

    /// Parses a name on the command line.
    pub fn parse(name: &str) -> Option<Provider> {
        match name {
            "redis" => Some(Provider::Redis),
            "redlock" => Some(Provider::Redlock),
            _ => None,
        }
    }
}

/// One instance, as a client sees it: a lazily (re)opened connection whose
/// every command is bounded by `timeout`.
struct Instance {
    addr: SocketAddr,
    timeout: Duration,
    con: Option<MultiplexedConnection>,
}

impl Instance {
    async fn invoke<T: FromRedisValue>(
        &mut self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let timeout = self.timeout;
        let result = tokio::time::timeout(timeout, async {
            if self.con.is_none() {
                let client = Client::open(url(self.addr))?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout));
                self.con = Some(
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?,
                );
            }
            let con = self.con.as_mut().expect("connected above");
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            for arg in args {
                invocation.arg(*arg);
            }
            invocation.invoke_async::<T>(con).await
        })
        .await;
        match result {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                self.con = None;
                Err(anyhow!("{}: {e}", self.addr))
            }
            Err(_) => {
                self.con = None;
                Err(anyhow!("{}: no answer within {timeout:?}", self.addr))
            }
        }
    }
}

/// A granted lock, as its holder knows it.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The fencing token.
    pub token: u64,
    /// The owner value stored in the lock key(s).
    pub owner: String,
    /// When the attempt that got the grant started (Redlock's t0; the key
    /// was set after this, so it expires no earlier than `started + ttl`).
    pub started: Instant,
    /// Until when the holder may consider the lock its own: `started + ttl`
    /// for one instance, `started + ttl - drift` for Redlock.
    pub valid_until: Instant,
    /// How the grant was made (Redlock: instances, counters, validity).
    pub detail: Option<String>,
}

/// The answer to one attempt.
#[derive(Debug)]
pub enum Attempt {
    /// The lock is ours.
    Granted(Grant),
    /// Not now (held by someone else, no majority, or an error), and why.
    Busy(String),
}

/// A lock client for one instance or for Redlock.
///
/// **Token, one instance.** The `INCR` runs in the same script as the `SET
/// NX PX`, so every grant gets the next number: tokens are strictly
/// increasing in grant order for as long as the counter is not lost (no
/// restart without persistence, no failover to a replica that missed it).
///
/// **Token, Redlock.** Redlock itself has no token. Derived here as:
///
/// 1. On each instance in turn (each call bounded by a per-instance timeout
///    far below the TTL), the same script: `SET lock owner NX PX ttl` and,
///    if set, `INCR` that instance's counter. Instances that grant return
///    their counter.
/// 2. With a majority granted, the token is the **maximum** of their
///    counters. Then, on each granting instance, a second script **raises
///    its counter to the token**, only while our lock key is still there.
/// 3. The grant stands only if the raise succeeded on a majority and the
///    time spent (t0 to now, both steps) is below `ttl - drift`, drift =
///    `ttl / 100 + 2 ms` (Redlock's validity check). Otherwise release
///    everywhere and retry later.
///
/// The maximum alone is not enough: counters drift apart (each grant and
/// each failed attempt touches only some instances), so a later majority
/// can have only low counters (r1=10, r2=0, r3=0: A gets {r1,r2}, token 11;
/// B then gets {r2,r3}, token 2). Step 2 fixes that: once A's token is on a
/// majority, any later majority shares an instance with it, and that
/// instance's `INCR` gives more than A's token. Because each raise happened
/// while A's key still sat on that instance, B's `SET NX` there came after
/// it: so if A's acquisition completed before B's started, B's token is
/// larger, whatever the clocks do. This holds only while instances never
/// forget a counter: an instance restarted without persistence (as in these
/// demos), flushed, or failed over to a replica that missed the write can
/// hand out a token at or below one already used, and a paused holder with
/// the higher token could then write after the new holder. Grants whose
/// acquisitions overlap in time are ordered only under Redlock's own timing
/// assumptions (bounded clock drift, no jumps).
pub struct LockClient {
    provider: Provider,
    instances: Vec<Instance>,
    ttl: Duration,
    owner: String,
    attempts: u64,
}

impl LockClient {
    /// A client of `addrs` (one for [`Provider::Redis`], N for Redlock);
    /// `owner` names it in the lock's value.
    pub fn new(provider: Provider, addrs: &[SocketAddr], owner: &str, ttl: Duration) -> Self {
        let timeout = match provider {
            Provider::Redis => Duration::from_secs(1),
            Provider::Redlock => Self::instance_timeout(),
        };
        LockClient {
            provider,
            instances: addrs
                .iter()
                .map(|&addr| Instance {
                    addr,
                    timeout,
                    con: None,
                })
                .collect(),
            ttl,
            owner: owner.to_owned(),
            attempts: 0,
        }
    }

    /// Redlock's per-instance timeout ("5 to 50 ms for a 10 s lock").
    pub fn instance_timeout() -> Duration {
        Duration::from_millis(50)
    }

    /// Redlock's clock drift allowance for a TTL: 1 % plus 2 ms.
    pub fn drift(ttl: Duration) -> Duration {
        ttl / 100 + Duration::from_millis(2)
    }

    /// How many instances make a majority.
    pub fn quorum(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    /// The lease every grant asks for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What an attempt sends, for the timeline.
    pub fn describe(&self) -> String {
        let ttl = self.ttl.as_millis();
        match self.provider {
            Provider::Redis => format!("SET NX PX {ttl} + INCR"),
            Provider::Redlock => format!("SET NX PX {ttl} + INCR on r1..r{}", self.instances.len()),
        }
    }

    fn next_owner(&mut self) -> String {
        self.attempts += 1;
        format!(
            "{}/pid {}/#{}",
            self.owner,
            std::process::id(),
            self.attempts
        )
    }

    /// One attempt, without waiting.
    pub async fn try_acquire(&mut self) -> Attempt {
        match self.provider {
            Provider::Redis => self.try_single().await,
            Provider::Redlock => self.try_redlock().await,
        }
    }

    async fn try_single(&mut self) -> Attempt {
        let owner = self.next_owner();
        let ttl = self.ttl.as_millis().to_string();
        let started = Instant::now();
        let answer: Result<(i64, i64, String)> = self.instances[0]
            .invoke(&ACQUIRE, &[LOCK_KEY, TOKEN_KEY], &[&owner, &ttl])
            .await;
        match answer {
            Ok((1, token, _)) => Attempt::Granted(Grant {
                token: token as u64,
                owner,
                started,
                valid_until: started + self.ttl,
                detail: None,
            }),
            Ok((_, left, holder)) => Attempt::Busy(format!(
                "busy: {} holds it, {left} ms left",
                owner_name(&holder)
            )),
            Err(e) => Attempt::Busy(format!("error: {e}")),
        }
    }

    async fn try_redlock(&mut self) -> Attempt {
        let owner = self.next_owner();
        let ttl = self.ttl.as_millis().to_string();
        let n = self.instances.len();
        let quorum = self.quorum();
        // Step 1: t0.
        let started = Instant::now();
        // Step 2: every instance in turn, each bounded by a short timeout.
        let mut counters: Vec<Option<u64>> = vec![None; n];
        let mut holders = Vec::new();
        for (i, instance) in self.instances.iter_mut().enumerate() {
            let answer: Result<(i64, i64, String)> = instance
                .invoke(&ACQUIRE, &[LOCK_KEY, TOKEN_KEY], &[&owner, &ttl])
                .await;
            match answer {
                Ok((1, counter, _)) => counters[i] = Some(counter as u64),
                Ok((_, _, holder)) => holders.push(owner_name(&holder).to_owned()),
                Err(_) => {}
            }
        }
        let granted: Vec<usize> = (0..n).filter(|&i| counters[i].is_some()).collect();
        let mut why = format!("{}/{n} granted", granted.len());
        if granted.len() >= quorum {
            // Our token: the highest counter of the granting majority,
            // then written back to it while we hold it there.
            let token = counters.iter().flatten().copied().max().unwrap_or(0);
            let token_text = token.to_string();
            let mut raised = 0;
            for &i in &granted {
                let answer: Result<i64> = self.instances[i]
                    .invoke(&RAISE, &[LOCK_KEY, TOKEN_KEY], &[&owner, &token_text])
                    .await;
                if matches!(answer, Ok(1)) {
                    raised += 1;
                }
            }
            // Step 3: validity = ttl - elapsed - drift.
            let elapsed = started.elapsed();
            let drift = Self::drift(self.ttl);
            if raised >= quorum && elapsed + drift < self.ttl {
                let shown: Vec<String> = counters
                    .iter()
                    .map(|c| c.map_or("-".to_owned(), |c| c.to_string()))
                    .collect();
                return Attempt::Granted(Grant {
                    token,
                    owner,
                    started,
                    valid_until: started + self.ttl - drift,
                    detail: Some(format!(
                        "{}/{n} granted in {} ms: token = max({}) = {token}, raised on {raised}",
                        granted.len(),
                        elapsed.as_millis(),
                        shown.join(",")
                    )),
                });
            }
            why = format!(
                "{}/{n} granted, {raised} raised, {} ms spent of {} ms: too slow",
                granted.len(),
                elapsed.as_millis(),
                self.ttl.as_millis()
            );
        } else if !holders.is_empty() {
            holders.dedup();
            why.push_str(&format!(" (held by {})", holders.join(", ")));
        }
        // Step 5: failed; unlock every instance, even those that said no.
        for instance in &mut self.instances {
            let _: Result<i64> = instance.invoke(&RELEASE, &[LOCK_KEY], &[&owner]).await;
        }
        Attempt::Busy(why)
    }

    /// Releases (compare-and-delete) on every instance; answers on how many
    /// our key was still there and deleted, and of how many.
    pub async fn release(&mut self, grant: &Grant) -> (usize, usize) {
        let mut deleted = 0;
        for instance in &mut self.instances {
            let answer: Result<i64> = instance
                .invoke(&RELEASE, &[LOCK_KEY], &[&grant.owner])
                .await;
            if matches!(answer, Ok(1)) {
                deleted += 1;
            }
        }
        (deleted, self.instances.len())
    }
}

/// The worker name in an owner value (`worker 1/pid 123/#4` -> `worker 1`).
pub fn owner_name(owner: &str) -> &str {
    owner.split('/').next().unwrap_or(owner)
}

// ---------------------------------------------------------------------------
// What workers report
// ---------------------------------------------------------------------------

/// Microseconds since the Unix epoch: the one clock a worker and its parent
/// share.
pub fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The wall-clock time of an `Instant` of this process.
pub fn micros_of(at: Instant) -> u64 {
    now_micros().saturating_sub(at.elapsed().as_micros() as u64)
}

/// Converts a worker's wall-clock stamps to this process's `Instant`s.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    instant: Instant,
    micros: u64,
}

impl WallClock {
    /// Pairs the two clocks now.
    pub fn now() -> Self {
        WallClock {
            instant: Instant::now(),
            micros: now_micros(),
        }
    }

    /// The `Instant` of a wall-clock stamp.
    pub fn instant(&self, micros: u64) -> Instant {
        if micros >= self.micros {
            self.instant + Duration::from_micros(micros - self.micros)
        } else {
            self.instant
                .checked_sub(Duration::from_micros(self.micros - micros))
                .unwrap_or(self.instant)
        }
    }
}

/// One line a worker prints (JSON). `at` fields are [`now_micros`] stamps.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The worker is up.
    Ready { pid: u32 },
    /// Asks for the lock.
    Acquire { at: u64, text: String },
    /// The lock said no (reported once per acquisition).
    Busy { at: u64, text: String },
    /// The lock said yes.
    Granted {
        at: u64,
        started: u64,
        token: u64,
        lease_ms: u64,
        detail: Option<String>,
    },
    /// Checked its lease before going on.
    Check { at: u64, left_ms: i64 },
    /// Starts the work between the lease check and the write.
    Working { at: u64, ms: u64 },
    /// Sends an HTTP request.
    Request {
        at: u64,
        method: String,
        token: Option<u64>,
        body: Option<String>,
    },
    /// Its answer (`status` 0: no answer, `error` says why).
    Reply {
        sent: u64,
        at: u64,
        method: String,
        token: Option<u64>,
        /// The request's body.
        sent_body: Option<String>,
        status: u16,
        error: Option<String>,
        highest: Option<u64>,
        body: String,
    },
    /// Gives the lock back.
    Release { at: u64, token: u64 },
    /// ... and on how many instances its key was still there.
    Released {
        at: u64,
        token: u64,
        deleted: usize,
        of: usize,
    },
    /// Something went wrong.
    Failed { at: u64, text: String },
    /// The command is finished.
    Done,
}

impl Event {
    /// The reply as the demos' [`Reply`].
    pub fn reply(&self) -> Option<Reply> {
        match self {
            Event::Reply {
                status,
                error,
                highest,
                body,
                ..
            } => Some(Reply {
                status: StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY),
                highest: *highest,
                error: error.clone(),
                body: body.clone(),
            }),
            _ => None,
        }
    }
}

/// In a worker: prints one event line.
pub fn emit(event: &Event) {
    process::report(&serde_json::to_string(event).expect("events serialize"));
}

/// One HTTP request from a worker, reported as [`Event::Reply`] (and, with
/// `draw`, [`Event::Request`] first). Gives up after 5 s.
pub async fn worker_http(
    target: SocketAddr,
    method: Method,
    path: &str,
    token: Option<u64>,
    body: Option<&str>,
    draw: bool,
) -> Event {
    let sent = now_micros();
    if draw {
        emit(&Event::Request {
            at: sent,
            method: method.to_string(),
            token,
            body: body.map(str::to_owned),
        });
    }
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        super::http(target, method.clone(), path, token, body),
    )
    .await;
    let (status, error, highest, answer_body) = match answer {
        Ok(Ok(reply)) => (
            reply.status.as_u16(),
            reply.error,
            reply.highest,
            reply.body.chars().take(200).collect(),
        ),
        Ok(Err(e)) => (0, Some(e.to_string()), None, String::new()),
        Err(_) => (
            0,
            Some("no answer within 5 s".to_owned()),
            None,
            String::new(),
        ),
    };
    let event = Event::Reply {
        sent,
        at: now_micros(),
        method: method.to_string(),
        token,
        sent_body: body.map(str::to_owned),
        status,
        error,
        highest,
        body: answer_body,
    };
    emit(&event);
    event
}

// ---------------------------------------------------------------------------
// Worker command line
// ---------------------------------------------------------------------------

/// A worker's options (`--name value` pairs after `--worker ROLE`).
#[derive(Debug, Clone, Default)]
pub struct Opts(HashMap<String, String>);

impl Opts {
    /// The value of `--name`.
    pub fn get(&self, name: &str) -> Result<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .with_context(|| format!("worker option --{name} missing"))
    }

    /// A number of milliseconds.
    pub fn millis(&self, name: &str) -> Result<Duration> {
        Ok(Duration::from_millis(self.get(name)?.parse()?))
    }

    /// A comma-separated list of addresses.
    pub fn addrs(&self, name: &str) -> Result<Vec<SocketAddr>> {
        self.get(name)?
            .split(',')
            .map(|a| a.parse().with_context(|| format!("bad address {a:?}")))
            .collect()
    }

    /// The lock provider.
    pub fn provider(&self) -> Result<Provider> {
        let name = self.get("provider")?;
        Provider::parse(name).with_context(|| format!("unknown provider {name:?}"))
    }
}

/// If this process is a worker (`--worker ROLE --opt value ...`), its role
/// and options.
pub fn worker_args() -> Option<(String, Opts)> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("--worker") {
        return None;
    }
    let role = args.next().unwrap_or_default();
    let mut opts = HashMap::new();
    while let Some(name) = args.next() {
        let value = args.next().unwrap_or_default();
        opts.insert(name.trim_start_matches("--").to_owned(), value);
    }
    Some((role, Opts(opts)))
}

/// A runtime for a worker: one thread, so that SIGSTOP freezes exactly what
/// a stop-the-world pause would.
pub fn worker_runtime() -> Result<Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// The `client` worker of the pause demos. Commands on stdin:
/// `run WORK_MS VALUE` (acquire, check the lease, work, PUT VALUE with the
/// token, release; reported as events, then `Done`) and `quit`.
pub fn client_worker(opts: &Opts) -> ExitCode {
    worker_exit(client_worker_inner(opts))
}

/// A worker's exit status; a failure is reported first (`Failed`, then
/// `Done`).
pub fn worker_exit(result: Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(&Event::Failed {
                at: now_micros(),
                text: format!("{e:#}"),
            });
            emit(&Event::Done);
            ExitCode::FAILURE
        }
    }
}

/// What a worker starts with: its runtime ([`worker_runtime`]), its lock
/// client, where it sends its requests (`--target`) and the object's path.
pub fn worker_lock(opts: &Opts) -> Result<(Runtime, LockClient, SocketAddr, String)> {
    let runtime = worker_runtime()?;
    let lock = LockClient::new(
        opts.provider()?,
        &opts.addrs("redis")?,
        opts.get("name")?,
        opts.millis("ttl-ms")?,
    );
    let target: SocketAddr = opts.get("target")?.parse()?;
    let path = opts.get("path")?.to_owned();
    Ok((runtime, lock, target, path))
}

fn client_worker_inner(opts: &Opts) -> Result<()> {
    let (runtime, mut lock, target, path) = worker_lock(opts)?;
    emit(&Event::Ready {
        pid: std::process::id(),
    });
    for line in process::worker_commands() {
        let mut words = line.splitn(3, ' ');
        match words.next() {
            Some("run") => {
                let work = Duration::from_millis(words.next().unwrap_or("0").parse()?);
                let value = words.next().unwrap_or_default().to_owned();
                runtime.block_on(run_once(&mut lock, target, &path, work, &value));
            }
            Some("quit") | None => break,
            Some(other) => bail!("unknown command {other:?}"),
        }
    }
    Ok(())
}

/// How often a waiting client asks the lock again.
const RETRY: Duration = Duration::from_millis(20);
/// A client gives up acquiring after this long.
const GIVE_UP: Duration = Duration::from_secs(10);

async fn run_once(
    lock: &mut LockClient,
    target: SocketAddr,
    path: &str,
    work: Duration,
    value: &str,
) {
    emit(&Event::Acquire {
        at: now_micros(),
        text: lock.describe(),
    });
    let deadline = Instant::now() + GIVE_UP;
    let mut told_busy = false;
    let grant = loop {
        match lock.try_acquire().await {
            Attempt::Granted(grant) => break grant,
            Attempt::Busy(text) => {
                if !told_busy {
                    told_busy = true;
                    emit(&Event::Busy {
                        at: now_micros(),
                        text,
                    });
                }
                if Instant::now() > deadline {
                    emit(&Event::Failed {
                        at: now_micros(),
                        text: format!("no lock after {GIVE_UP:?}"),
                    });
                    emit(&Event::Done);
                    return;
                }
                tokio::time::sleep(RETRY).await;
            }
        }
    };
    emit(&Event::Granted {
        at: now_micros(),
        started: micros_of(grant.started),
        token: grant.token,
        lease_ms: lock.ttl().as_millis() as u64,
        detail: grant.detail.clone(),
    });
    // The check a careful client makes before it writes.
    let left = grant.valid_until.saturating_duration_since(Instant::now());
    emit(&Event::Check {
        at: now_micros(),
        left_ms: left.as_millis() as i64,
    });
    emit(&Event::Working {
        at: now_micros(),
        ms: work.as_millis() as u64,
    });
    // The work between the check and the write (this is where a pause
    // strikes). A thread sleep: with SIGSTOP the process stops wherever it
    // is; the sleep just gives the pause somewhere to land.
    tokio::time::sleep(work).await;
    worker_http(
        target,
        Method::PUT,
        path,
        Some(grant.token),
        Some(value),
        true,
    )
    .await;
    emit(&Event::Release {
        at: now_micros(),
        token: grant.token,
    });
    let (deleted, of) = lock.release(&grant).await;
    emit(&Event::Released {
        at: now_micros(),
        token: grant.token,
        deleted,
        of,
    });
    emit(&Event::Done);
}

// ---------------------------------------------------------------------------
// The pause scenario (parent side)
// ---------------------------------------------------------------------------

/// The object both workers write.
pub const KEY: &str = "/demo/report";
/// What each worker writes.
pub const VALUES: [&str; 2] = ["from worker 1", "from worker 2"];

/// The two-worker pause scenario of `redis_lock` and `redlock`.
pub struct PauseDemo<'a> {
    /// Which lock.
    pub provider: Provider,
    /// Its servers (one, or the Redlock instances).
    pub servers: &'a [RedisServer],
    /// The lock service's lane in the diagram.
    pub lock_lane: &'a str,
    /// Lease asked for by every grant.
    pub ttl: Duration,
    /// Worker 1's pause (at least this; it lasts until worker 2 is done).
    pub pause: Duration,
    /// Each worker's work between its lease check and its write.
    pub work: Duration,
    /// How long after worker 1 starts its work the SIGSTOP comes.
    pub stop_after: Duration,
}

/// What one run showed.
pub struct PauseOutcome {
    /// The rendered timeline.
    pub diagram: String,
    /// Each worker's token.
    pub tokens: [Option<u64>; 2],
    /// Each worker's PUT answer.
    pub puts: [Option<Reply>; 2],
    /// What the storage holds at the end.
    pub stored: Option<String>,
    /// The gateway's fence for [`KEY`] (fenced run).
    pub highest: Option<u64>,
    /// How long worker 1 was frozen.
    pub paused: Duration,
    /// Worker 1's lease as it knew it (ms left at its check).
    pub checked_left_ms: Option<i64>,
    /// Worker 1's write was sent after SIGCONT, and worker 2 was done before
    /// it: the pause landed where the scenario needs it.
    pub interleaved: bool,
    /// How the grants were made (Redlock detail lines).
    pub grants: Vec<String>,
    /// Worker pids.
    pub pids: [u32; 2],
}

struct Lanes {
    me: Lane,
    lock: Lane,
    route: Route,
}

/// What the parent learned from one worker's events.
#[derive(Default)]
struct Seen {
    token: Option<u64>,
    started: Option<Instant>,
    put: Option<Reply>,
    put_sent: Option<Instant>,
    put_answered: Option<Instant>,
    released: Option<(Instant, usize, usize)>,
    checked_left_ms: Option<i64>,
    detail: Option<String>,
    failed: Vec<String>,
}

fn draw(tl: &Timeline, lanes: &Lanes, clock: &WallClock, event: &Event, seen: &mut Seen) {
    let at = |micros: u64| clock.instant(micros);
    let Lanes { me, lock, route } = *lanes;
    match event {
        Event::Ready { .. } | Event::Done => {}
        Event::Acquire { at: t, text } => tl.msg_at(at(*t), me, lock, text.clone()),
        Event::Busy { at: t, text } => tl.msg_at(at(*t), lock, me, text.clone()),
        Event::Granted {
            at: t,
            started,
            token,
            lease_ms,
            detail,
        } => {
            seen.token = Some(*token);
            seen.started = Some(at(*started));
            seen.detail = detail.clone();
            let text = match detail {
                Some(_) => format!("token {token} (lease {lease_ms} ms)"),
                None => format!("OK, token {token} (lease {lease_ms} ms)"),
            };
            tl.msg_at(at(*t), lock, me, text);
            if let Some(detail) = detail {
                tl.note_at(at(*t), lock, detail.clone());
            }
        }
        Event::Check { at: t, left_ms } => {
            seen.checked_left_ms = Some(*left_ms);
            tl.note_at(
                at(*t),
                me,
                format!("checks its lease: {left_ms} ms left, goes ahead"),
            );
        }
        Event::Working { at: t, ms } => {
            tl.note_at(at(*t), me, format!("prepares its write ({ms} ms of work)"))
        }
        Event::Request {
            at: t,
            method,
            token,
            body,
        } => {
            let method: Method = method.parse().unwrap_or(Method::PUT);
            let token = token.map(|t| t.to_string());
            seen.put_sent = Some(at(*t));
            tl.msg_at(
                at(*t),
                me,
                route.via,
                request_label(&method, token.as_deref(), body.as_deref()),
            );
        }
        Event::Reply { at: t, .. } => {
            let reply = event.reply().expect("a reply");
            seen.put_answered = Some(at(*t));
            if reply.status.as_u16() == 0 || reply.status == StatusCode::BAD_GATEWAY {
                tl.note_at(at(*t), me, "request failed".to_owned());
            } else if reply.is_stale() {
                tl.refused_at(at(*t), route.server, me, reply.label());
            } else {
                tl.msg_at(at(*t), route.server, me, reply.label());
            }
            seen.put = Some(reply);
        }
        Event::Release { at: t, token } => tl.msg_at(
            at(*t),
            me,
            lock,
            format!("release {token} (compare-and-delete)"),
        ),
        Event::Released {
            at: t, deleted, of, ..
        } => {
            seen.released = Some((at(*t), *deleted, *of));
            let text = match (*deleted, *of) {
                (0, _) => "not its key any more: nothing deleted".to_owned(),
                (1, 1) => "deleted".to_owned(),
                (d, n) => format!("deleted on {d}/{n}"),
            };
            tl.msg_at(at(*t), lock, me, text);
        }
        Event::Failed { at: t, text } => {
            seen.failed.push(text.clone());
            tl.note_at(at(*t), me, format!("error: {text}"));
        }
    }
}

/// Reads `worker`'s events, drawing each, until one matches `until`.
fn pump(
    worker: &Worker,
    tl: &Timeline,
    lanes: &Lanes,
    clock: &WallClock,
    seen: &mut Seen,
    timeout: Duration,
    until: impl Fn(&Event) -> bool,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = worker.recv(left)?;
        let event: Event = serde_json::from_str(&line)
            .with_context(|| format!("{} said {line:?}", worker.name()))?;
        draw(tl, lanes, clock, &event, seen);
        if until(&event) {
            return Ok(());
        }
    }
}

impl PauseDemo<'_> {
    /// Both runs, straight to the storage then through fencegate, shown and
    /// judged ([`PauseOutcome::judge`], with `why`); as [`direct_then_fenced`].
    pub fn run_both(&self, runtime: &Runtime, why: impl Fn(u64) -> String) -> Option<bool> {
        direct_then_fenced(
            |fenced| self.run(runtime, fenced).map_err(|e| format!("{e:#}")),
            |fenced, outcome| outcome.judge(fenced, &why),
        )
    }

    fn worker_args(&self, name: &str, target: SocketAddr) -> Vec<String> {
        [
            ("--name", name.to_owned()),
            ("--provider", self.provider.name().to_owned()),
            ("--redis", addr_list(self.servers)),
            ("--target", target.to_string()),
            ("--path", KEY.to_owned()),
            ("--ttl-ms", self.ttl.as_millis().to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v])
        .collect()
    }

    /// Runs the scenario once, straight to the storage or through fencegate.
    pub fn run(&self, runtime: &Runtime, fenced: bool) -> Result<PauseOutcome> {
        for server in self.servers {
            server.flush()?;
        }
        let names = ["worker 1", "worker 2"];
        let lanes: Vec<&str> = if fenced {
            vec![names[0], names[1], self.lock_lane, "fencegate", "storage"]
        } else {
            vec![names[0], names[1], self.lock_lane, "storage"]
        };
        let tl = Timeline::new(&lanes);
        let gateway_lane = tl.find_lane("fencegate");
        let storage = runtime
            .block_on(Storage::start(&tl, gateway_lane))
            .map_err(|e| anyhow!(e))?;
        let gateway = match fenced {
            true => Some(
                runtime
                    .block_on(start_gateway(storage.addr))
                    .map_err(|e| anyhow!(e))?,
            ),
            false => None,
        };
        let (target, route) = match (&gateway, gateway_lane) {
            (Some(gateway), Some(lane)) => (
                gateway.data_addr(),
                Route {
                    addr: gateway.data_addr(),
                    via: lane,
                    server: lane,
                },
            ),
            _ => (
                storage.addr,
                Route::direct(storage.addr, tl.lane("storage")),
            ),
        };
        let lock = tl.lane(self.lock_lane);
        let lanes_of = |i: usize| Lanes {
            me: tl.lane(names[i]),
            lock,
            route,
        };

        let mut workers = [
            Worker::spawn(names[0], "client", &self.worker_args(names[0], target))?,
            Worker::spawn(names[1], "client", &self.worker_args(names[1], target))?,
        ];
        for worker in &workers {
            let line = worker.recv(Duration::from_secs(10))?;
            if !matches!(serde_json::from_str(&line), Ok(Event::Ready { .. })) {
                bail!("{} did not start: {line}", worker.name());
            }
        }
        let clock = WallClock::now();
        let mut seen = [Seen::default(), Seen::default()];
        let wait = Duration::from_secs(20);
        let work = self.work.as_millis();

        // Worker 1: lock, lease check, then its work, during which it stops.
        workers[0].send(&format!("run {work} {}", VALUES[0]))?;
        pump(
            &workers[0],
            &tl,
            &lanes_of(0),
            &clock,
            &mut seen[0],
            wait,
            |e| matches!(e, Event::Working { .. } | Event::Done),
        )?;
        std::thread::sleep(self.stop_after);
        workers[0].freeze()?;
        let frozen = Instant::now();
        let me = tl.lane(names[0]);
        tl.pause_begin(
            me,
            format!("~~ SIGSTOP: process {} frozen ~~", workers[0].pid()),
        );

        // Worker 2 meanwhile: waits for the lease to run out, then does the
        // same with its own token.
        workers[1].send(&format!("run {work} {}", VALUES[1]))?;
        pump(
            &workers[1],
            &tl,
            &lanes_of(1),
            &clock,
            &mut seen[1],
            wait,
            |e| matches!(e, Event::Done),
        )?;
        let worker_2_done = Instant::now();
        std::thread::sleep(self.pause.saturating_sub(frozen.elapsed()));
        // Stamped before the signal: the worker may run (and report) before
        // `resume` even returns.
        let resumed = Instant::now();
        workers[0].resume()?;
        let paused = resumed - frozen;
        tl.pause_end_at(
            resumed,
            me,
            format!(
                "~~ SIGCONT after {} ms: carries on, unaware ~~",
                paused.as_millis()
            ),
        );
        pump(
            &workers[0],
            &tl,
            &lanes_of(0),
            &clock,
            &mut seen[0],
            wait,
            |e| matches!(e, Event::Done),
        )?;
        for worker in &mut workers {
            let _ = worker.send("quit");
        }

        // The leases that ran out rather than being released.
        for s in &seen {
            let (Some(token), Some(started)) = (s.token, s.started) else {
                continue;
            };
            let expires = started + self.ttl;
            let released_before = s
                .released
                .is_some_and(|(at, deleted, _)| deleted > 0 && at < expires);
            if !released_before && expires < Instant::now() {
                let keys = match self.provider {
                    Provider::Redis => "key expires",
                    Provider::Redlock => "keys expire",
                };
                tl.note_at(
                    expires,
                    lock,
                    format!(
                        "token {token}: lease over, {keys} (PX {})",
                        self.ttl.as_millis()
                    ),
                );
            }
        }

        let (stored, highest) = runtime
            .block_on(end_run(storage, gateway, KEY))
            .map_err(|e| anyhow!(e))?;
        for s in &seen {
            if let Some(error) = s.failed.first() {
                bail!("a worker failed: {error}");
            }
        }
        let interleaved = seen[0].put_sent.is_some_and(|sent| sent > resumed)
            && seen[1].put_answered.is_some_and(|at| at < resumed)
            && worker_2_done <= resumed;
        Ok(PauseOutcome {
            diagram: tl.render(),
            tokens: [seen[0].token, seen[1].token],
            puts: [seen[0].put.clone(), seen[1].put.clone()],
            stored,
            highest,
            paused,
            checked_left_ms: seen[0].checked_left_ms,
            interleaved,
            grants: seen.iter().filter_map(|s| s.detail.clone()).collect(),
            pids: [workers[0].pid(), workers[1].pid()],
        })
    }
}

impl Shown for PauseOutcome {
    fn show(&self, title: &str) {
        show_run(title, &self.diagram, KEY, &self.stored, "", self.highest);
    }
}

impl PauseOutcome {
    /// Prints what the run showed; whether it is what the demo claims.
    /// `why(token 1)` is the rest of the explanation of a corrupted direct
    /// run (after "... was silently replaced by").
    pub fn judge(&self, fenced: bool, why: impl Fn(u64) -> String) -> bool {
        let [t1, t2] = self.tokens.map(|t| t.unwrap_or(0));
        if !fenced {
            let corrupted = self.corrupted();
            if corrupted {
                println!(
                    "=> CORRUPTED: worker 2's acknowledged write (token {t2}) was silently replaced by"
                );
                println!("{}", why(t1));
            } else {
                println!(
                    "=> expected worker 1's late write to replace worker 2's: {}",
                    self.summary()
                );
            }
            return corrupted;
        }
        let refused = self.refused();
        if refused {
            println!(
                "=> SAFE: fencegate refused token {t1} (409 stale_token, highest {t2}); the late write"
            );
            println!(
                "   never reached the storage, which still holds {:?}.",
                VALUES[1]
            );
        } else {
            println!(
                "=> expected 409 for worker 1 and worker 2's value stored: {}",
                self.summary()
            );
        }
        refused
    }

    /// Both writes acknowledged, and the stored value is worker 1's (the
    /// paused, superseded holder): the corruption the direct run must show.
    pub fn corrupted(&self) -> bool {
        self.interleaved
            && self.puts.iter().all(|p| p.as_ref().is_some_and(Reply::ok))
            && self.stored.as_deref() == Some(VALUES[0])
            && self.tokens_ordered()
    }

    /// Worker 1's write refused as stale, worker 2's stands: what the fenced
    /// run must show.
    pub fn refused(&self) -> bool {
        self.interleaved
            && self.puts[0].as_ref().is_some_and(Reply::is_stale)
            && self.puts[1].as_ref().is_some_and(Reply::ok)
            && self.stored.as_deref() == Some(VALUES[1])
            && self.tokens_ordered()
    }

    /// Worker 2's token is above worker 1's.
    pub fn tokens_ordered(&self) -> bool {
        matches!(self.tokens, [Some(a), Some(b)] if a < b)
    }

    /// One line on what the workers got, for a failed run.
    pub fn summary(&self) -> String {
        let put = |p: &Option<Reply>| p.as_ref().map_or("no answer".to_owned(), Reply::label);
        format!(
            "tokens {:?}, worker 1 got {}, worker 2 got {}, stored {:?}, pause in place: {}",
            self.tokens,
            put(&self.puts[0]),
            put(&self.puts[1]),
            self.stored,
            self.interleaved
        )
    }
}

/// If this process is a worker (`--worker ROLE ...`): plays it if its role
/// is `role` (exit 2 for any other) and returns its exit status.
pub fn as_worker(role: &str, worker: impl FnOnce(&Opts) -> ExitCode) -> Option<ExitCode> {
    let (asked, opts) = worker_args()?;
    Some(match asked == role {
        true => worker(&opts),
        false => ExitCode::from(2),
    })
}

/// The parent's start: its runtime ([`parent_runtime`], with the Ctrl-C
/// cleanup installed) and the servers `start` starts. On failure, prints
/// why (after `demo: `) and gives the exit status.
pub fn start_parent(
    demo: &str,
    start: impl FnOnce() -> Result<Vec<RedisServer>>,
) -> std::result::Result<(Runtime, Vec<RedisServer>), ExitCode> {
    let runtime = parent_runtime().map_err(|e| {
        println!("{demo}: {e:#}");
        ExitCode::FAILURE
    })?;
    runtime.block_on(async { process::install_ctrl_c_cleanup() });
    let servers = start().map_err(|e| {
        println!("{demo}: could not start redis-server: {e:#}");
        ExitCode::FAILURE
    })?;
    Ok((runtime, servers))
}

/// The runtime the parent serves storage and gateway on (its threads keep
/// serving while the demo's main thread waits for workers).
pub fn parent_runtime() -> Result<Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}
