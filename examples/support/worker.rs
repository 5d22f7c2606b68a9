//! A worker process's side of the lock-provider demos (this example
//! re-executed with `--worker ROLE key=value...`): its arguments, and the
//! reports it prints for the parent, one JSON line each, stamped with the
//! wall clock (the one clock the processes on this machine share).

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::Method;
use serde::{Deserialize, Serialize};

use super::{http, request_label, Reply, Result};

/// How long a worker waits for the answer to one HTTP request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// One line on a worker's stdout: when (microseconds since the UNIX epoch)
/// and what.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// When it happened.
    pub t: u64,
    /// What happened.
    #[serde(flatten)]
    pub what: What,
}

/// What a worker reports.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// Started and connected.
    Ready,
    /// Something to draw: a message from lane `from` to lane `to` (a
    /// refusal, if `refused`), or without `to`, a note on `from`.
    Draw {
        from: String,
        to: Option<String>,
        text: String,
        refused: bool,
    },
    /// The lock is held with `token`; `detail` is what the parent needs to
    /// watch the grant; the attempt that got it began at `began`.
    Granted {
        token: u64,
        detail: String,
        began: u64,
    },
    /// Checked its lease and prepares its write: freeze it now.
    Checked,
    /// A waiting worker just learned that the lock is free.
    SawFree,
    /// A request carrying `value`, sent at `sent`, and its answer (`status`
    /// 0: none, and `error` says why).
    Reply {
        method: String,
        token: Option<u64>,
        value: Option<String>,
        sent: u64,
        status: u16,
        error: Option<String>,
        highest: Option<u64>,
        body: String,
    },
    /// Finished; the worker exits.
    Done,
    /// Something went wrong; the worker exits non-zero.
    Failed { error: String },
}

/// Microseconds since the UNIX epoch, now.
pub fn now_micros() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.unwrap_or_default().as_micros() as u64
}

/// The wall-clock stamp of an [`Instant`] of this process.
pub fn micros_of(at: Instant) -> u64 {
    now_micros().saturating_sub(at.elapsed().as_micros() as u64)
}

/// The [`Instant`] of a wall-clock stamp taken on this machine.
pub fn instant_of(micros: u64) -> Instant {
    let (now, wall) = (Instant::now(), now_micros());
    match micros.checked_sub(wall) {
        Some(ahead) => now + Duration::from_micros(ahead),
        None => now
            .checked_sub(Duration::from_micros(wall - micros))
            .unwrap_or(now),
    }
}

/// Prints one report, stamped now, for the parent (flushed at once).
fn emit(what: What) {
    let t = now_micros();
    if let Ok(line) = serde_json::to_string(&Report { t, what }) {
        let mut out = std::io::stdout().lock();
        // The parent gone means nobody is left to tell.
        _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }
}

/// If this process is a worker (`--worker ROLE key=value...`): plays it
/// with `play(role, args)` on a one-thread runtime (so that SIGSTOP freezes
/// exactly what a stop-the-world pause would), reports a failure, and gives
/// the exit status.
pub fn as_worker<F>(play: impl FnOnce(String, Args) -> F) -> Option<ExitCode>
where
    F: Future<Output = Result<()>>,
{
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let [flag, role, words @ ..] = argv.as_slice() else {
        return None;
    };
    if flag != "--worker" {
        return None;
    }
    let result = Args::parse(words).and_then(|args| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(play(role.clone(), args))
    });
    Some(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let error = e.to_string();
            emit(What::Failed { error });
            ExitCode::FAILURE
        }
    })
}

/// A worker's `key=value` arguments.
#[derive(Debug, Clone)]
pub struct Args(HashMap<String, String>);

impl Args {
    /// Parses `key=value` words.
    pub fn parse(words: &[String]) -> Result<Args> {
        let pair = |word: &String| -> Result<(String, String)> {
            let (key, value) = word
                .split_once('=')
                .ok_or(format!("{word:?} is not key=value"))?;
            Ok((key.to_owned(), value.to_owned()))
        };
        Ok(Args(words.iter().map(pair).collect::<Result<_>>()?))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Result<&str> {
        let value = self.0.get(key).map(String::as_str);
        value.ok_or_else(|| format!("worker argument {key}= missing").into())
    }

    /// The value of `key`, parsed.
    pub fn parse_as<T: std::str::FromStr>(&self, key: &str) -> Result<T>
    where
        T::Err: std::fmt::Display,
    {
        let value = self.get(key)?;
        let parsed = value.parse();
        parsed.map_err(|e| format!("worker argument {key}={value}: {e}").into())
    }
}

/// A worker's voice: stamps and prints what it does, for the parent to draw.
#[derive(Debug, Clone)]
pub struct Reporter {
    /// Lanes: this worker's, the lock service's, and the one its requests
    /// go to (`fencegate` or `storage`).
    lanes: [String; 3],
    /// Reports only what the parent counts, nothing to draw.
    quiet: bool,
}

impl Reporter {
    /// The reporter of the worker named `name=`, a client of `service=`
    /// that sends its requests `via=`; quiet with `quiet=1`.
    pub fn new(args: &Args) -> Result<Reporter> {
        let lane = |key| Ok::<_, super::Error>(args.get(key)?.to_owned());
        let lanes = [lane("name")?, lane("service")?, lane("via")?];
        let quiet = args.get("quiet").is_ok_and(|quiet| quiet == "1");
        Ok(Reporter { lanes, quiet })
    }

    /// Prints one report, stamped now.
    pub fn emit(&self, what: What) {
        emit(what);
    }

    /// This worker's lane name (`worker 1`).
    pub fn me(&self) -> &str {
        &self.lanes[0]
    }

    fn draw(&self, from: usize, to: Option<usize>, text: String, refused: bool) {
        let from = self.lanes[from].clone();
        let to = to.map(|to| self.lanes[to].clone());
        if !self.quiet {
            emit(What::Draw {
                from,
                to,
                text,
                refused,
            });
        }
    }

    /// Something the worker did or saw on its own.
    pub fn note(&self, text: impl Into<String>) {
        self.draw(0, None, text.into(), false);
    }

    /// Something seen on the lock service's lane.
    pub fn service_note(&self, text: impl Into<String>) {
        self.draw(1, None, text.into(), false);
    }

    /// A request from this worker to the lock service.
    pub fn ask(&self, text: impl Into<String>) {
        self.draw(0, Some(1), text.into(), false);
    }

    /// An answer from the lock service to this worker.
    pub fn answer(&self, text: impl Into<String>) {
        self.draw(1, Some(0), text.into(), false);
    }

    /// A waiting worker learns, now, that the lock is free: the lock service
    /// had let the previous grant go by then at the latest.
    pub fn saw_free(&self) {
        emit(What::SawFree);
    }

    /// Sends one HTTP request to `target` and reports it with its answer;
    /// `None` if there was none.
    pub async fn request(
        &self,
        target: SocketAddr,
        method: Method,
        path: &str,
        token: Option<u64>,
        value: Option<&str>,
    ) -> Option<Reply> {
        let label = request_label(&method, token, value);
        self.draw(0, Some(2), label, false);
        let sent = now_micros();
        let answer = tokio::time::timeout(
            ANSWER_TIMEOUT,
            http(target, method.clone(), path, token, value),
        );
        let (reply, error) = match answer.await {
            Ok(Ok(reply)) => (Some(reply), None),
            Ok(Err(e)) => (None, Some(e.to_string())),
            Err(_) => (None, Some(format!("no answer within {ANSWER_TIMEOUT:?}"))),
        };
        match (&reply, &error) {
            (Some(reply), _) => self.draw(2, Some(0), reply.label(), reply.is_stale()),
            (None, error) => self.note(format!(
                "request failed: {}",
                error.as_deref().unwrap_or("?")
            )),
        }
        let (method, value) = (method.to_string(), value.map(str::to_owned));
        let status = reply.as_ref().map_or(0, |r| r.status.as_u16());
        let error = error.or_else(|| reply.as_ref()?.error.clone());
        let highest = reply.as_ref().and_then(|r| r.highest);
        let body = reply
            .as_ref()
            .map(|r| r.body.chars().take(200).collect())
            .unwrap_or_default();
        emit(What::Reply {
            method,
            token,
            value,
            sent,
            status,
            error,
            highest,
            body,
        });
        reply
    }
}
