//! A PostgreSQL lock table, a worker process frozen past its lease, and
//! fencegate.
//!
//! Recipe (the seeds' database lock: a table with an auto-increment id, the
//! lock's name, a custom value and a time to live):
//!
//! ```sql
//! CREATE TABLE locks (id bigserial PRIMARY KEY, name text NOT NULL UNIQUE,
//!                     owner text NOT NULL, expires_at timestamptz NOT NULL);
//! -- acquire (polled every 100 ms while busy), one transaction:
//! LOCK TABLE locks IN SHARE ROW EXCLUSIVE MODE;   -- acquirers take turns
//! DELETE FROM locks WHERE name = $1 AND expires_at <= clock_timestamp();
//! SELECT ... FROM locks WHERE name = $1;          -- a live row: busy
//! INSERT INTO locks (name, owner, expires_at)
//!   VALUES ($1, $2, clock_timestamp() + ttl) RETURNING id;
//! -- renew (every ttl/3, in the background):
//! UPDATE locks SET expires_at = clock_timestamp() + ttl
//!   WHERE id = $1 AND expires_at > clock_timestamp();
//! -- release:
//! DELETE FROM locks WHERE id = $1;
//! ```
//!
//! The lease is judged by the database's clock only (`clock_timestamp()`),
//! never by the client's. Expired rows are cleared by the next acquirer,
//! in the same transaction, instead of by a background sweeper.
//!
//! Token: the row's **id**, from the `bigserial` sequence. `nextval` never
//! hands out a value twice or goes back (also after a rollback or a crash),
//! and the table lock makes acquirers take turns, so each grant's id is
//! higher than every earlier holder's.
//!
//! Why a lock table and not `pg_advisory_lock` plus a sequence: an advisory
//! lock belongs to a database session and has no lease. A frozen holder's
//! session stays open, so the lock is never freed until something kills the
//! session (`idle_session_timeout`, TCP keep-alive, an operator), which is a
//! lease again, only hidden in server settings; and the token would still
//! need a separate sequence, bumped at grant time. The table keeps lease,
//! holder and token in one visible row.
//!
//! Worker 1 (a real process) is frozen with SIGSTOP right after checking its
//! row; its renewals stop, the row's `expires_at` passes, worker 2's next
//! poll clears it, inserts a row with a higher id and writes. SIGCONT: worker
//! 1 writes with its old id. Run twice, straight to the storage and through
//! fencegate; exit 0 only if the first run lost worker 2's write and the
//! second refused worker 1's.
//!
//! ```sh
//! cargo run --example postgres_lock
//! ```

mod support;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::lock_demo::{self, instant_of, Args, Demo, LockClient, Reporter, Service};
use support::postgres::{connect, Postgres};
use support::Result;

/// The lock both workers take.
const LOCK: &str = "report-lock";
/// Lease of every grant.
const TTL: Duration = Duration::from_secs(2);
/// How often a waiting worker tries again.
const POLL: Duration = Duration::from_millis(100);

const DEMO: Demo = Demo {
    name: "postgres_lock",
    service: "postgres",
    title: "a PostgreSQL lock table (id bigserial, name, owner, expires_at; TTL 2 s) and a worker process frozen past its lease",
    intro: &[
        "recipe: one transaction: LOCK TABLE, delete the name's expired row, insert a row with",
        "        expires_at = clock_timestamp() + 2 s unless a live one exists (then poll every 100 ms);",
        "        holders renew every ~670 ms; release deletes the row by id.",
        "token:  the row's id (bigserial: nextval never goes back). A table, not pg_advisory_lock:",
        "        an advisory lock has no lease (a frozen holder keeps it while its session lives)",
        "        and would need a separate sequence for the token anyway.",
        "real:   PostgreSQL (Debian's) on loopback, two worker processes, SIGSTOP/SIGCONT, fencegate",
        "        in-process in front of its embedded object store.",
    ],
    outro: &[],
    claim: "postgres tokens (lock table id from a sequence) only grow; the direct run lost worker 2's write, fencegate refused the stale one",
};

const SCHEMA: &str = "CREATE TABLE locks (
    id bigserial PRIMARY KEY,
    name text NOT NULL UNIQUE,
    owner text NOT NULL,
    expires_at timestamptz NOT NULL
)";

struct PgService {
    server: Postgres,
    /// The demo's own session, to create the table and watch the rows.
    client: tokio_postgres::Client,
}

impl Service for PgService {
    fn require() {
        Postgres::require();
    }

    async fn start() -> Result<Self> {
        let server = Postgres::start().await?;
        let client = connect(server.addr).await?;
        client.batch_execute(SCHEMA).await?;
        Ok(PgService { server, client })
    }

    fn worker_args(&self) -> Vec<String> {
        vec![
            format!("postgres={}", self.server.addr),
            format!("lock={LOCK}"),
        ]
    }

    /// Watches worker 1's row until the database's clock passes its
    /// `expires_at` (or the row is gone), and puts that moment on the lane.
    async fn released(&self, token: u64, _detail: String) -> Result<(Instant, String)> {
        let id = token as i64;
        let mut last: Option<i64> = None;
        loop {
            let row = self
                .client
                .query_opt(
                    "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint,
                            expires_at <= clock_timestamp()
                     FROM locks WHERE id = $1",
                    &[&id],
                )
                .await?;
            let expired = match row {
                Some(row) => {
                    last = Some(row.get(0));
                    row.get::<_, bool>(1)
                }
                None => true,
            };
            if expired {
                let at = last
                    .map(|us| instant_of(us as u64))
                    .unwrap_or_else(Instant::now);
                return Ok((at, format!("row id {id}: expires_at passes, lease over")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One worker's session.
struct PgLock {
    client: Arc<tokio_postgres::Client>,
    name: String,
    owner: String,
}

/// A granted lock: the row's id and the renewal task.
struct Held {
    id: i64,
    renewal: tokio::task::JoinHandle<()>,
}

/// Pushes the row's `expires_at` forward every TTL/3 while it is live, and
/// says when it no longer is.
async fn renew(client: Arc<tokio_postgres::Client>, id: i64, rep: Reporter) {
    loop {
        tokio::time::sleep(TTL / 3).await;
        let renewed = client
            .execute(
                "UPDATE locks SET expires_at = clock_timestamp() + make_interval(secs => $2)
                 WHERE id = $1 AND expires_at > clock_timestamp()",
                &[&id, &TTL.as_secs_f64()],
            )
            .await;
        match renewed {
            Ok(1) => {}
            Ok(_) => {
                rep.note(format!("renewal: row id {id} expired or gone"));
                return;
            }
            Err(e) => {
                rep.note(format!("renewal failed: {e}"));
                return;
            }
        }
    }
}

impl LockClient for PgLock {
    type Held = Held;

    async fn connect(args: &Args, rep: &Reporter) -> Result<Self> {
        let addr: SocketAddr = args.parse_as("postgres")?;
        Ok(PgLock {
            client: Arc::new(connect(addr).await?),
            name: args.get("lock")?.to_owned(),
            owner: rep.me().to_owned(),
        })
    }

    async fn acquire(&mut self, rep: &Reporter) -> Result<(u64, String, Held)> {
        let client = &self.client;
        rep.ask(format!(
            "acquire {:?}: clear expired, insert (TTL {} s)",
            self.name,
            TTL.as_secs()
        ));
        let mut told_busy = false;
        let (id, expires_us) = loop {
            client
                .batch_execute("BEGIN; LOCK TABLE locks IN SHARE ROW EXCLUSIVE MODE")
                .await?;
            client
                .execute(
                    "DELETE FROM locks WHERE name = $1 AND expires_at <= clock_timestamp()",
                    &[&self.name],
                )
                .await?;
            let holder = client
                .query_opt(
                    "SELECT id, owner,
                            (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
                     FROM locks WHERE name = $1",
                    &[&self.name],
                )
                .await?;
            if let Some(row) = holder {
                client.batch_execute("COMMIT").await?;
                if !told_busy {
                    told_busy = true;
                    let (id, owner, left): (i64, String, i64) =
                        (row.get(0), row.get(1), row.get(2));
                    rep.answer(format!("busy: row id {id} ({owner}), {left} ms left"));
                    rep.note(format!("polls every {} ms", POLL.as_millis()));
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
            let row = client
                .query_one(
                    "INSERT INTO locks (name, owner, expires_at)
                     VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
                     RETURNING id, (extract(epoch FROM expires_at) * 1000000)::bigint",
                    &[&self.name, &self.owner, &TTL.as_secs_f64()],
                )
                .await?;
            client.batch_execute("COMMIT").await?;
            if told_busy {
                rep.saw_free();
            }
            break (row.get::<_, i64>(0), row.get::<_, i64>(1));
        };
        rep.answer(format!("row id {id} inserted"));
        rep.note(format!("token = id = {id}"));
        let renewal = tokio::spawn(renew(client.clone(), id, rep.clone()));
        Ok((id as u64, expires_us.to_string(), Held { id, renewal }))
    }

    async fn check(&mut self, rep: &Reporter, held: &Held) -> Result<()> {
        let row = self
            .client
            .query_opt(
                "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint
                 FROM locks WHERE id = $1",
                &[&held.id],
            )
            .await?;
        match row.map(|row| row.get::<_, i64>(0)) {
            Some(left) if left > 0 => {
                rep.note(format!(
                    "row expires in {left} ms (asked postgres): goes ahead, prepares its write"
                ));
                Ok(())
            }
            _ => Err("its row had expired at the check".into()),
        }
    }

    async fn release(&mut self, rep: &Reporter, held: Held) -> Result<()> {
        held.renewal.abort();
        rep.ask(format!("release: DELETE ... WHERE id = {}", held.id));
        let deleted = self
            .client
            .execute("DELETE FROM locks WHERE id = $1", &[&held.id])
            .await?;
        if deleted == 1 {
            rep.answer("1 row deleted");
        } else {
            rep.answer("0 rows: the lock was lost while it slept");
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    lock_demo::main::<PgService, PgLock>(&DEMO)
}
