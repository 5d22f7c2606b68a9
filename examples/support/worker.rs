//! A worker process's side of the lock-provider demos (this example
//! re-executed with `--worker ROLE key=value...`): its arguments, and the
//! reports it prints for the parent, one JSON line each, stamped with the
//! wall clock (the one clock the processes on this machine share).

use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::Method;
use serde::{Deserialize, Serialize};

use super::{http, process, request_label, Reply, Result};

/// How long a worker waits for an answer to one HTTP request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// One line on a worker's stdout.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    /// When it happened: microseconds since the UNIX epoch.
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
    /// Something seen on `lane` (the worker's own, or the lock service's).
    Note { lane: String, text: String },
    /// A message between two lanes.
    Msg {
        from: String,
        to: String,
        text: String,
        refused: bool,
    },
    /// The lock is held with `token`; `detail` is what the parent needs to
    /// watch the grant (a key, a node path, a row id); the attempt that got
    /// it began at `began` (a wall-clock stamp).
    Granted {
        token: u64,
        detail: String,
        began: u64,
    },
    /// Checked its lease and prepares its write: freeze it now.
    Checked,
    /// A waiting worker just learned that the lock is free.
    SawFree,
    /// A request sent at `sent` and its answer (`status` 0: none; then
    /// `error` says why). `value` is what the request carried.
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
    micros(SystemTime::now())
}

fn micros(at: SystemTime) -> u64 {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    since.as_micros() as u64
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

/// Prints one report, stamped now.
fn emit(what: What) {
    let t = now_micros();
    if let Ok(line) = serde_json::to_string(&Report { t, what }) {
        process::report(&line);
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
        let mut runtime = tokio::runtime::Builder::new_current_thread();
        runtime
            .enable_all()
            .build()?
            .block_on(play(role.clone(), args))
    });
    Some(match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            emit(What::Failed {
                error: e.to_string(),
            });
            ExitCode::FAILURE
        }
    })
}

/// A worker's `key=value` arguments.
#[derive(Debug, Clone)]
pub struct Args(Vec<(String, String)>);

impl Args {
    /// Parses `key=value` words.
    pub fn parse(words: &[String]) -> Result<Args> {
        let pair = |word: &String| match word.split_once('=') {
            Some((key, value)) => Ok((key.to_owned(), value.to_owned())),
            None => Err(format!("worker argument {word:?} is not key=value")),
        };
        Ok(Args(words.iter().map(pair).collect::<Result<_, _>>()?))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Result<&str> {
        let found = self
            .0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str());
        found.ok_or_else(|| format!("worker argument {key}= missing").into())
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
    me: String,
    service: String,
    /// The lane the worker's requests go to (`fencegate` or `storage`).
    via: String,
    /// Whether to report messages and notes, or only what the parent counts.
    draw: bool,
}

impl Reporter {
    /// The reporter of the worker named `name=`, a client of `service=`
    /// that sends its requests `via=`; quiet (nothing to draw) with
    /// `quiet=1`.
    pub fn new(args: &Args) -> Result<Reporter> {
        let (me, service) = (
            args.get("name")?.to_owned(),
            args.get("service")?.to_owned(),
        );
        let via = args.get("via")?.to_owned();
        let draw = !matches!(args.get("quiet"), Ok("1"));
        Ok(Reporter {
            me,
            service,
            via,
            draw,
        })
    }

    /// Prints one report, stamped now.
    pub fn emit(&self, what: What) {
        emit(what);
    }

    /// This worker's lane name (`worker 1`).
    pub fn me(&self) -> &str {
        &self.me
    }

    fn msg(&self, from: &str, to: &str, text: String, refused: bool) {
        let (from, to) = (from.to_owned(), to.to_owned());
        if self.draw {
            self.emit(What::Msg {
                from,
                to,
                text,
                refused,
            });
        }
    }

    fn note_on(&self, lane: &str, text: String) {
        if self.draw {
            let lane = lane.to_owned();
            self.emit(What::Note { lane, text });
        }
    }

    /// Something the worker did or saw on its own.
    pub fn note(&self, text: impl Into<String>) {
        self.note_on(&self.me, text.into());
    }

    /// Something seen on the lock service's lane.
    pub fn service_note(&self, text: impl Into<String>) {
        self.note_on(&self.service, text.into());
    }

    /// A request from this worker to the lock service.
    pub fn ask(&self, text: impl Into<String>) {
        self.msg(&self.me, &self.service, text.into(), false);
    }

    /// An answer from the lock service to this worker.
    pub fn answer(&self, text: impl Into<String>) {
        self.msg(&self.service, &self.me, text.into(), false);
    }

    /// A waiting worker learns, now, that the lock is free: the lock service
    /// had let the previous grant go by then at the latest.
    pub fn saw_free(&self) {
        self.emit(What::SawFree);
    }

    /// Sends one HTTP request to `target` (drawn as going `via=`) and
    /// reports it with its answer; `None` if there was none.
    pub async fn request(
        &self,
        target: SocketAddr,
        method: Method,
        path: &str,
        token: Option<u64>,
        value: Option<&str>,
    ) -> Option<Reply> {
        let token_text = token.map(|t| t.to_string());
        let label = request_label(&method, token_text.as_deref(), value);
        self.msg(&self.me, &self.via, label, false);
        let sent = now_micros();
        let answer = http(target, method.clone(), path, token, value);
        let answer = match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
            Ok(answer) => answer.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {ANSWER_TIMEOUT:?}")),
        };
        match &answer {
            Ok(reply) => self.msg(&self.via, &self.me, reply.label(), reply.is_stale()),
            Err(e) => self.note(format!("request failed: {e}")),
        }
        let reply = answer.as_ref().ok();
        self.emit(What::Reply {
            method: method.to_string(),
            token,
            value: value.map(str::to_owned),
            sent,
            status: reply.map_or(0, |r| r.status.as_u16()),
            error: answer
                .as_ref()
                .map_or_else(|e| Some(e.clone()), |r| r.error.clone()),
            highest: reply.and_then(|r| r.highest),
            body: reply
                .map(|r| r.body.chars().take(200).collect())
                .unwrap_or_default(),
        });
        answer.ok()
    }
}
