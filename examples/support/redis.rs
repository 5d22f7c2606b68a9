//! Redis as a lock provider (`redis_lock`, `redlock`, `torture`): real
//! `redis-server`s on loopback, and the seeds' recipes as a [`LockClient`].
//!
//! **One instance.** One Lua script does `SET lock owner NX PX ttl` and, if
//! the key was set, `INCR` of a token counter, so every grant gets the next
//! number: tokens grow in grant order for as long as the counter is not lost
//! (no restart without persistence, no failover to a replica that missed it).
//!
//! **Redlock** has no token; it is derived here:
//!
//! 1. t0; on each instance in turn (each call bounded by a timeout far below
//!    the TTL), the same script. Granting instances return their counter.
//! 2. With a majority granted, the token is the **maximum** of their
//!    counters, and a second script **raises** each granting instance's
//!    counter to it, only while our lock key is still there.
//! 3. The grant stands only if the raise succeeded on a majority and t0..now
//!    is below `ttl - drift`, drift = `ttl / 100 + 2 ms`. Otherwise release
//!    everywhere and retry after a random delay.
//!
//! The maximum alone is not enough: counters drift apart, so a later majority
//! can hold only low ones (r1=10, r2=0, r3=0: A gets {r1,r2}, token 11; B
//! then {r2,r3}, token 2). With the raise, any later majority shares an
//! instance whose counter already holds A's token, and B's `SET NX` there
//! came after the raise: if A's acquisition completed before B's began, B's
//! token is larger, whatever the clocks do. This holds only while instances
//! never forget a counter (as above); acquisitions that overlap in time are
//! ordered only under Redlock's own timing assumptions.
//!
//! Release, on every instance, deletes the key only if it still holds our
//! owner value.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::redis::aio::MultiplexedConnection;
use ::redis::{cmd, AsyncConnectionConfig, Client, FromRedisValue, RedisResult, Script};

use super::lock_demo::{LockClient, Service};
use super::process::{free_port, require_binary, temp_dir, Server};
use super::worker::{Args, Reporter};
use super::Result;

/// The key that is the lock.
pub const LOCK_KEY: &str = "fencegate-demo:lock";
/// The counter the fencing tokens come from (on each instance).
pub const TOKEN_KEY: &str = "fencegate-demo:lock:token";
/// The lease of every grant in the two-worker demos.
pub const TTL: Duration = Duration::from_millis(500);
/// Redlock's per-instance timeout ("5 to 50 ms for a 10 s lock").
pub const INSTANCE_TIMEOUT: Duration = Duration::from_millis(50);
/// One instance's timeout, where there is no majority to fall back on.
const SINGLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Takes the lock and, in the same atomic script, a token. Answers
/// `{1, token, ""}` on a grant, `{0, ms left, holder}` when it is held.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
           return {1, redis.call('INCR', KEYS[2]), ''}
         end
         return {0, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[1])}",
    )
});

/// Deletes the lock only if it still holds our owner value (a lease that
/// ran out may have been granted to someone else since).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
         return 0",
    )
});

/// Redlock's step 2: while this instance still holds our lock key, raises
/// its counter to at least the token. Answers 1 if so, 0 if our key is gone.
static RAISE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
         if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
           redis.call('SET', KEYS[2], ARGV[2])
         end
         return 1",
    )
});

/// One instance, as a client sees it: a lazily (re)opened connection whose
/// every call is bounded by `timeout`.
struct Instance {
    addr: SocketAddr,
    timeout: Duration,
    con: Option<MultiplexedConnection>,
}

impl Instance {
    fn new(addr: SocketAddr, timeout: Duration) -> Self {
        let con = None;
        Instance { addr, timeout, con }
    }

    async fn call<T>(
        &mut self,
        call: impl AsyncFnOnce(&mut MultiplexedConnection) -> RedisResult<T>,
    ) -> Result<T> {
        let (addr, timeout) = (self.addr, self.timeout);
        let answer = tokio::time::timeout(timeout, async {
            let con = match self.con.take() {
                Some(con) => con,
                None => {
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout));
                    let client = Client::open(format!("redis://{addr}/"))?;
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await?
                }
            };
            call(self.con.insert(con)).await
        });
        match answer.await {
            Ok(Ok(value)) => Ok(value),
            failed => {
                // A connection that failed or hung is opened anew next time.
                self.con = None;
                let why = failed.map_or(format!("no answer within {timeout:?}"), |e| {
                    e.err().map(|e| e.to_string()).unwrap_or_default()
                });
                Err(format!("{addr}: {why}").into())
            }
        }
    }

    async fn script<T: FromRedisValue>(&mut self, script: &Script, args: &[&str]) -> Result<T> {
        let mut invocation = script.key(LOCK_KEY);
        invocation.key(TOKEN_KEY).arg(args);
        self.call(async |con| invocation.invoke_async(con).await)
            .await
    }

    async fn get(&mut self, key: &str) -> Result<Option<String>> {
        self.call(async |con| cmd("GET").arg(key).query_async(con).await)
            .await
    }
}

/// The worker name in an owner value (`worker 1/pid 123/#4` -> `worker 1`).
pub fn owner_name(owner: &str) -> &str {
    owner.split('/').next().unwrap_or(owner)
}

/// `N` independent `redis-server`s (named `redis`, or `r1`...`rN`), each on
/// a free loopback port with a temporary dir and no persistence; killed on
/// drop.
pub struct Redis<const N: usize> {
    servers: Vec<(SocketAddr, Server)>,
}

impl<const N: usize> Redis<N> {
    /// Their addresses as one worker argument value (`a,b,c`).
    pub fn addrs(&self) -> String {
        let addrs: Vec<String> = self.servers.iter().map(|(a, _)| a.to_string()).collect();
        addrs.join(",")
    }

    fn instances(&self) -> Vec<Instance> {
        let instance = |(addr, _): &(SocketAddr, Server)| Instance::new(*addr, SINGLE_TIMEOUT);
        self.servers.iter().map(instance).collect()
    }

    /// Empties every instance: no lock, token counters back to 0.
    pub async fn flush(&self) -> Result<()> {
        for mut instance in self.instances() {
            instance
                .call(async |con| cmd("FLUSHALL").query_async::<()>(con).await)
                .await?;
        }
        Ok(())
    }

    /// Who holds the lock on a majority of the instances (the worker name
    /// of the owner value), if anyone.
    pub async fn holder(&self) -> Option<String> {
        let mut votes: HashMap<String, usize> = HashMap::new();
        for mut instance in self.instances() {
            if let Ok(Some(owner)) = instance.get(LOCK_KEY).await {
                *votes.entry(owner_name(&owner).to_owned()).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .find(|&(_, n)| n > N / 2)
            .map(|(name, _)| name)
    }
}

impl<const N: usize> Service for Redis<N> {
    fn require() {
        require_binary("redis-server");
    }

    async fn start() -> Result<Self> {
        let mut servers = Vec::new();
        for i in 1..=N {
            let name = if N == 1 {
                "redis".into()
            } else {
                format!("r{i}")
            };
            let (dir, port) = (temp_dir("fencegate-redis-", None)?, free_port()?);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut command = Command::new(require_binary("redis-server"));
            command.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
            command
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(dir.path());
            let mut server = Server::start(&name, command, dir)?;
            server.wait_ready(addr, Duration::from_secs(10))?;
            // The free port may have been taken by another redis in between.
            let mut instance = Instance::new(addr, SINGLE_TIMEOUT);
            let info: String = instance
                .call(async |con| cmd("INFO").arg("server").query_async(con).await)
                .await?;
            let pid = info
                .lines()
                .find_map(|line| line.strip_prefix("process_id:"));
            if pid.and_then(|pid| pid.trim().parse().ok()) != Some(server.pid()) {
                return Err(format!("{addr} is answered by another redis, not {name}").into());
            }
            servers.push((addr, server));
        }
        Ok(Redis { servers })
    }

    fn worker_args(&self) -> Vec<String> {
        let ttl = TTL.as_millis();
        vec![format!("redis={}", self.addrs()), format!("ttl_ms={ttl}")]
    }

    /// Polls worker 1's lock key until it is gone from a majority: Redis
    /// expired it by its own clock.
    async fn released(&self, token: u64, owner: String) -> Result<(Instant, String)> {
        let mut instances = self.instances();
        loop {
            let mut holding = 0;
            for instance in &mut instances {
                let value = instance.get(LOCK_KEY).await?;
                holding += usize::from(value.as_deref() == Some(&owner));
            }
            if holding <= N / 2 {
                let keys = if N == 1 { "key expires" } else { "keys expire" };
                let text = format!("token {token}: lease over, {keys} (PX {})", TTL.as_millis());
                return Ok((Instant::now(), text));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A lock client of one instance, or of several with Redlock.
pub struct RedisLock {
    instances: Vec<Instance>,
    ttl: Duration,
    owner: String,
    attempts: u64,
}

/// A grant, as its holder knows it.
pub struct Held {
    /// The fencing token.
    pub token: u64,
    /// The owner value stored in the lock key(s).
    pub owner: String,
    /// When the attempt that got the grant began (Redlock's t0).
    pub began: Instant,
    /// Until when the holder may take the lock for its own: `began + ttl`,
    /// less Redlock's drift allowance.
    pub valid_until: Instant,
}

impl RedisLock {
    /// One attempt: the grant and, for Redlock, how it was made; or why not.
    async fn try_acquire(&mut self) -> std::result::Result<(Held, Option<String>), String> {
        self.attempts += 1;
        let owner = format!(
            "{}/pid {}/#{}",
            self.owner,
            std::process::id(),
            self.attempts
        );
        let (ttl, n, began) = (
            self.ttl.as_millis().to_string(),
            self.instances.len(),
            Instant::now(),
        );
        let mut counters: Vec<Option<u64>> = vec![None; n];
        let mut busy = Vec::new();
        for (i, instance) in self.instances.iter_mut().enumerate() {
            match instance
                .script::<(i64, i64, String)>(&ACQUIRE, &[&owner, &ttl])
                .await
            {
                Ok((1, counter, _)) => counters[i] = Some(counter as u64),
                Ok((_, left, holder)) => {
                    busy.push(format!("{} holds it, {left} ms left", owner_name(&holder)))
                }
                Err(e) => busy.push(format!("error: {e}")),
            }
        }
        let granted: Vec<usize> = (0..n).filter(|&i| counters[i].is_some()).collect();
        let mut why = match busy.first() {
            Some(busy) if n == 1 => format!("busy: {busy}"),
            _ => format!("{}/{n} granted", granted.len()),
        };
        if let Some(token) = counters
            .iter()
            .flatten()
            .copied()
            .max()
            .filter(|_| granted.len() > n / 2)
        {
            let mut raised = 0;
            for &i in granted.iter().filter(|_| n > 1) {
                let answer = self.instances[i]
                    .script(&RAISE, &[&owner, &token.to_string()])
                    .await;
                raised += usize::from(matches!(answer, Ok(1)));
            }
            let (elapsed, drift) = (began.elapsed(), drift(self.ttl, n));
            if (n == 1 || raised > n / 2) && elapsed + drift < self.ttl {
                let shown: Vec<String> = counters
                    .iter()
                    .map(|c| c.map_or("-".into(), |c| c.to_string()))
                    .collect();
                let detail = (n > 1).then(|| {
                    let (g, ms, shown) = (granted.len(), elapsed.as_millis(), shown.join(","));
                    format!("{g}/{n} granted in {ms} ms: token = max({shown}) = {token}, raised on {raised}")
                });
                let valid_until = began + self.ttl - drift;
                let held = Held {
                    token,
                    owner,
                    began,
                    valid_until,
                };
                return Ok((held, detail));
            }
            why = format!(
                "{why}, {raised} raised, {} ms spent of {ttl} ms: too slow",
                elapsed.as_millis()
            );
        }
        if n > 1 || !granted.is_empty() {
            // Redlock's last step: unlock everywhere, even where it said no.
            for instance in &mut self.instances {
                _ = instance.script::<i64>(&RELEASE, &[&owner]).await;
            }
        }
        Err(why)
    }
}

/// Redlock's clock drift allowance for a TTL: 1 % plus 2 ms (none for one
/// instance, whose lease is judged by its own single clock).
pub fn drift(ttl: Duration, instances: usize) -> Duration {
    match instances {
        1 => Duration::ZERO,
        _ => ttl / 100 + Duration::from_millis(2),
    }
}

impl LockClient for RedisLock {
    type Held = Held;

    async fn connect(args: &Args, rep: &Reporter) -> Result<Self> {
        let addrs = args.get("redis")?.split(',').map(str::parse);
        let addrs: Vec<SocketAddr> = addrs.collect::<std::result::Result<_, _>>()?;
        let timeout = if addrs.len() == 1 {
            SINGLE_TIMEOUT
        } else {
            INSTANCE_TIMEOUT
        };
        let instances = addrs
            .iter()
            .map(|&addr| Instance::new(addr, timeout))
            .collect();
        let ttl = Duration::from_millis(args.parse_as("ttl_ms")?);
        let owner = rep.me().to_owned();
        Ok(RedisLock {
            instances,
            ttl,
            owner,
            attempts: 0,
        })
    }

    async fn acquire(&mut self, rep: &Reporter) -> Result<(u64, String, Held)> {
        let (ttl, n) = (self.ttl.as_millis(), self.instances.len());
        let on = if n == 1 {
            String::new()
        } else {
            format!(" on r1..r{n}")
        };
        rep.ask(format!("SET NX PX {ttl} + INCR{on}"));
        let mut told_busy = false;
        loop {
            match self.try_acquire().await {
                Ok((held, detail)) => {
                    if told_busy {
                        rep.saw_free();
                    }
                    let ok = if detail.is_some() { "" } else { "OK, " };
                    rep.answer(format!("{ok}token {} (lease {ttl} ms)", held.token));
                    detail.map(|detail| rep.service_note(detail));
                    return Ok((held.token, held.owner.clone(), held));
                }
                Err(why) if !told_busy => {
                    told_busy = true;
                    rep.answer(why);
                }
                Err(_) => {}
            }
            // Retry after a random delay (Redlock's advice), so that
            // contenders that collided do not keep colliding.
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let jitter = u64::from(now.subsec_nanos()) % 8;
            tokio::time::sleep(Duration::from_millis(3 + jitter)).await;
        }
    }

    async fn check(&mut self, rep: &Reporter, held: &Held) -> Result<()> {
        let left = held.valid_until.saturating_duration_since(Instant::now());
        rep.note(format!(
            "checks its lease: {} ms left, goes ahead",
            left.as_millis()
        ));
        Ok(())
    }

    async fn release(&mut self, rep: &Reporter, held: Held) -> Result<()> {
        rep.ask(format!("release {} (compare-and-delete)", held.token));
        let mut deleted = 0;
        for instance in &mut self.instances {
            let answer = instance.script(&RELEASE, &[&held.owner]).await;
            deleted += usize::from(matches!(answer, Ok(1)));
        }
        rep.answer(match (deleted, self.instances.len()) {
            (0, _) => "not its key any more: nothing deleted".to_owned(),
            (1, 1) => "deleted".to_owned(),
            (d, n) => format!("deleted on {d}/{n}"),
        });
        Ok(())
    }
}
