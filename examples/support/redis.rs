//! Redis as a lock provider (`redis_lock`, `redlock`, `torture`): real
//! `redis-server`s on loopback, and the seeds' recipes as a [`LockClient`]:
//! one instance (`try_single`), or Redlock over several (`try_redlock`; why
//! its token is raised: the README, "Redlock's token, derived").

use std::net::SocketAddr;
use std::process::Command;
use std::sync::LazyLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::redis::aio::MultiplexedConnection;
use ::redis::{cmd, AsyncConnectionConfig, Client, FromRedisValue, RedisResult, Script};

use super::lock_demo::{LockClient, Service};
use super::port::free_port;
use super::process::{require_binary, temp_dir, Server};
use super::worker::{Args, Reporter};
use super::Result;

/// The key that is the lock.
pub const LOCK_KEY: &str = "fencegate-demo:lock";
/// The counter the fencing tokens come from (on each instance).
pub const TOKEN_KEY: &str = "fencegate-demo:lock:token";
/// The lease of every grant in the two-worker demos.
pub const TTL: Duration = Duration::from_millis(500);

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

/// While this instance still holds our lock key, raises its counter to at
/// least the token. Answers 1 if so, 0 if our key is gone.
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
        let why = match answer.await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {timeout:?}"),
        };
        // A connection that failed or hung is opened anew next time.
        self.con = None;
        Err(format!("{addr}: {why}").into())
    }

    async fn script<T: FromRedisValue>(&mut self, script: &Script, args: &[&str]) -> Result<T> {
        let mut invocation = script.key(LOCK_KEY);
        invocation.key(TOKEN_KEY).arg(args);
        self.call(async |con| invocation.invoke_async(con).await)
            .await
    }

    async fn owner(&mut self) -> Result<Option<String>> {
        self.call(async |con| cmd("GET").arg(LOCK_KEY).query_async(con).await)
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
        let addrs: Vec<String> = self.servers.iter().map(|s| s.0.to_string()).collect();
        addrs.join(",")
    }

    fn instances(&self) -> Vec<Instance> {
        let instance = |server: &(SocketAddr, Server)| Instance::new(server.0, SECOND);
        self.servers.iter().map(instance).collect()
    }

    /// Who holds the lock on a majority of the instances (the worker name
    /// of the owner value), if anyone.
    pub async fn holder(&self) -> Option<String> {
        let mut owners = Vec::new();
        for mut instance in self.instances() {
            owners.extend(instance.owner().await.ok().flatten());
        }
        let holders = |name: &&str| owners.iter().filter(|o| owner_name(o) == *name).count();
        let names: Vec<&str> = owners.iter().map(|o| owner_name(o)).collect();
        names
            .into_iter()
            .find(|name| holders(name) > N / 2)
            .map(str::to_owned)
    }
}

/// The timeout of the parent's calls, and of a client of one instance
/// (which has no majority to fall back on).
const SECOND: Duration = Duration::from_secs(1);

impl<const N: usize> Service for Redis<N> {
    fn require() {
        require_binary("redis-server");
    }

    async fn start() -> Result<Self> {
        let mut servers = Vec::new();
        for i in 1..=N {
            let name = match N {
                1 => "redis".to_owned(),
                _ => format!("r{i}"),
            };
            let (dir, port) = (temp_dir("fencegate-redis-", None)?, free_port()?);
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut command = Command::new(require_binary("redis-server"));
            command.args(["--port", &port.to_string(), "--bind", "127.0.0.1"]);
            command.args(["--save", "", "--appendonly", "no", "--dir"]);
            let server = Server::start(&name, command.arg(dir.path()), dir)?;
            let info = async || {
                let info = async |con: &mut _| cmd("INFO").arg("server").query_async(con).await;
                Instance::new(addr, SECOND).call(info).await
            };
            let info: String = server.serving(Duration::from_secs(10), info).await?;
            // The free port may have been taken by another redis in between.
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
                holding += usize::from(instance.owner().await?.as_deref() == Some(&*owner));
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
    /// Until when the holder may take the lock for its own.
    pub valid_until: Instant,
}

/// One attempt's answer: the grant and, for Redlock, how it was made; or
/// why not.
type Attempt = std::result::Result<(Held, Option<String>), String>;

impl RedisLock {
    /// A fresh owner value per attempt, so that a late answer to an old
    /// attempt can never be taken for the current one.
    fn next_owner(&mut self) -> (String, String, Instant) {
        self.attempts += 1;
        let (pid, ttl) = (std::process::id(), self.ttl.as_millis().to_string());
        let owner = format!("{}/pid {pid}/#{}", self.owner, self.attempts);
        (owner, ttl, Instant::now())
    }

    /// One instance: the script's answer is the grant, or who holds the lock.
    async fn try_single(&mut self) -> Attempt {
        let (owner, ttl, began) = self.next_owner();
        let instance = &mut self.instances[0];
        let answer = instance
            .script::<(i64, i64, String)>(&ACQUIRE, &[&owner, &ttl])
            .await;
        match answer.map_err(|e| format!("error: {e}"))? {
            (1, token, _) => {
                let (token, valid_until) = (token as u64, began + self.ttl);
                let held = Held {
                    token,
                    owner,
                    began,
                    valid_until,
                };
                Ok((held, None))
            }
            (_, left, holder) => Err(format!(
                "busy: {} holds it, {left} ms left",
                owner_name(&holder)
            )),
        }
    }

    /// Redlock: the script on each instance in turn; with a majority, the
    /// token is the highest of their counters, raised on each of them; the
    /// grant stands if the raise reached a majority within the validity
    /// time (the TTL less 1 % + 2 ms for clock drift). Otherwise, unlock.
    async fn try_redlock(&mut self) -> Attempt {
        let (owner, ttl, began) = self.next_owner();
        let n = self.instances.len();
        let (mut counters, mut holders) = (vec![None; n], Vec::new());
        for (i, instance) in self.instances.iter_mut().enumerate() {
            match instance
                .script::<(i64, i64, String)>(&ACQUIRE, &[&owner, &ttl])
                .await
            {
                Ok((1, counter, _)) => counters[i] = Some(counter as u64),
                Ok((_, _, holder)) => holders.push(owner_name(&holder).to_owned()),
                Err(_) => {}
            }
        }
        let granted: Vec<usize> = (0..n).filter(|&i| counters[i].is_some()).collect();
        let mut why = format!("{}/{n} granted", granted.len());
        let token = counters.iter().flatten().max().copied();
        if let Some(token) = token.filter(|_| granted.len() > n / 2) {
            let mut raised = 0;
            for &i in &granted {
                let token = token.to_string();
                let answer = self.instances[i].script(&RAISE, &[&owner, &token]).await;
                raised += usize::from(matches!(answer, Ok(1)));
            }
            let (elapsed, drift) = (began.elapsed(), self.ttl / 100 + Duration::from_millis(2));
            if raised > n / 2 && elapsed + drift < self.ttl {
                let shown = |c: &Option<u64>| c.map_or("-".into(), |c| c.to_string());
                let counters: Vec<String> = counters.iter().map(shown).collect();
                let (g, ms, counters) = (granted.len(), elapsed.as_millis(), counters.join(","));
                let detail = format!("{g}/{n} granted in {ms} ms: token = max({counters}) = {token}, raised on {raised}");
                let valid_until = began + self.ttl - drift;
                let held = Held {
                    token,
                    owner,
                    began,
                    valid_until,
                };
                return Ok((held, Some(detail)));
            }
            let ms = elapsed.as_millis();
            why = format!("{why}, {raised} raised, {ms} ms spent of {ttl} ms: too slow");
        } else if !holders.is_empty() {
            holders.dedup();
            why = format!("{why} (held by {})", holders.join(", "));
        }
        // Unlock everywhere, even where it said no: a call that timed out
        // may have set the key.
        for instance in &mut self.instances {
            _ = instance.script::<i64>(&RELEASE, &[&owner]).await;
        }
        Err(why)
    }
}

impl LockClient for RedisLock {
    type Held = Held;

    async fn connect(args: &Args, rep: &Reporter) -> Result<Self> {
        let addrs = args.get("redis")?.split(',').map(str::parse);
        let addrs: Vec<SocketAddr> = addrs.collect::<std::result::Result<_, _>>()?;
        // Redlock's per-instance timeout: "5 to 50 ms for a 10 s lock".
        let timeout = if addrs.len() == 1 {
            SECOND
        } else {
            Duration::from_millis(50)
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
            let attempt = match self.instances.len() {
                1 => self.try_single().await,
                _ => self.try_redlock().await,
            };
            match attempt {
                Ok((held, detail)) => {
                    if told_busy {
                        rep.saw_free();
                    }
                    let ok = if detail.is_some() { "" } else { "OK, " };
                    rep.answer(format!("{ok}token {} (lease {ttl} ms)", held.token));
                    if let Some(detail) = detail {
                        rep.service_note(detail);
                    }
                    return Ok((held.token, held.owner.clone(), held));
                }
                Err(why) if !told_busy => {
                    told_busy = true;
                    rep.answer(why);
                }
                Err(_) => {}
            }
            // A random delay (Redlock's advice), so that contenders that
            // collided do not keep colliding.
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
