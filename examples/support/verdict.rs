//! How a demo reports: each run under a heading with its diagram and final
//! value, the `=>` lines saying what it showed, and the verdict line whose
//! outcome is the exit status.

use std::future::Future;
use std::process::ExitCode;
use std::time::Instant;

use super::storage::{fence_path, shown};
use super::timeline::{legend, WIDTH};
use super::{process, Reply};

/// A heading line for one run.
pub fn heading(text: &str) -> String {
    let line = format!("== {text} ");
    let pad = WIDTH.saturating_sub(line.chars().count());
    format!("{line}{}", "=".repeat(pad))
}

/// Prints one run: its heading, diagram and legend, the final stored value
/// of `key` (followed by `more` on the same line), and the fence's highest
/// token when the run went through fencegate.
pub fn show_run(
    title: &str,
    diagram: &str,
    key: &str,
    stored: &Option<String>,
    more: &str,
    highest: Option<u64>,
) {
    println!("{}", heading(title));
    print!("{diagram}");
    println!("{}\n", legend());
    println!("final stored value of {key}: {}{more}", shown(stored));
    if let Some(highest) = highest {
        let path = fence_path(key);
        println!("fencegate admin plane: GET {path} -> highest {highest}");
    }
}

/// The two runs of a pause demo: straight to the storage, then through
/// fencegate. `run(fenced)` plays one; `judge(fenced, title, outcome)`
/// prints it under `title` and what it showed (the `=>` lines), and says
/// whether that is what the demo claims. `None` if a run failed (said so
/// already); else whether both runs showed what they should.
pub fn direct_then_fenced<O>(
    mut run: impl FnMut(bool) -> Result<O, String>,
    mut judge: impl FnMut(bool, &str, &O) -> bool,
) -> Option<bool> {
    let mut pass = true;
    let titles = [
        "run 1 of 2: straight to the storage, nothing checks tokens",
        "run 2 of 2: through fencegate",
    ];
    for (fenced, title) in [false, true].into_iter().zip(titles) {
        let outcome = run(fenced).map_err(|e| {
            process::wait_if_interrupted();
            println!(
                "{} run failed: {e}",
                if fenced { "fenced" } else { "direct" }
            );
        });
        let outcome = outcome.ok()?;
        pass &= judge(fenced, title, &outcome);
        println!();
    }
    Some(pass)
}

/// The end of a two-client demo's `main`: plays `run(fenced)` straight to
/// the storage and then through fencegate, judges each run with `text`, and
/// prints the verdict (`claim`, time since `started`).
pub fn judge_two_clients<F>(
    started: Instant,
    run: impl Fn(bool) -> F,
    text: &TwoClientsText,
    claim: &str,
) -> ExitCode
where
    F: Future<Output = super::Result<TwoClients>>,
{
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let runs = direct_then_fenced(
        |fenced| runtime.block_on(run(fenced)).map_err(|e| e.to_string()),
        |fenced, title, outcome: &TwoClients| {
            outcome.show(title);
            outcome.judge(fenced, text)
        },
    );
    let Some(pass) = runs else {
        return ExitCode::FAILURE;
    };
    verdict(pass, started, claim)
}

/// Prints the verdict line (`claim` is what a pass showed) with the time
/// since `started`; the demo's exit status.
pub fn verdict(pass: bool, started: Instant, claim: &str) -> ExitCode {
    let elapsed = started.elapsed().as_secs_f64();
    if pass {
        println!("VERDICT: PASS: {claim} ({elapsed:.1} s)");
        ExitCode::SUCCESS
    } else {
        println!("VERDICT: FAIL: the runs did not show what this demo claims ({elapsed:.1} s)");
        ExitCode::FAILURE
    }
}

/// What a run of the two-writer scenario showed: client 1 (the older
/// token) writes `values[0]` after its lease is over, client 2 (the newer
/// token) writes `values[1]`.
pub struct TwoClients {
    /// The object both write.
    pub key: &'static str,
    /// What each writes.
    pub values: [&'static str; 2],
    /// The rendered timeline.
    pub diagram: String,
    /// The answer to client 1's write.
    pub client_1: Reply,
    /// The answer to client 2's write.
    pub client_2: Reply,
    /// What the storage holds at the end.
    pub stored: Option<String>,
    /// The fence's highest token for `key` (fenced run).
    pub highest: Option<u64>,
}

/// What a two-writer demo says about a run that showed what it should.
pub struct TwoClientsText<'a> {
    /// The direct run: client 1's write replaced client 2's.
    pub corrupted: &'a [&'a str],
    /// Client 1's write, as the direct run's failure calls it (`stale`).
    pub write: &'a str,
    /// The fenced run: client 1's write was refused.
    pub safe: &'a [&'a str],
}

impl TwoClients {
    /// Prints the run under `title` ([`show_run`]).
    pub fn show(&self, title: &str) {
        let (diagram, stored) = (&self.diagram, &self.stored);
        show_run(title, diagram, self.key, stored, "", self.highest);
    }

    /// Prints what the run showed (`text`); whether it is what the demo
    /// claims: direct, client 1's write replaced client 2's; fenced, it was
    /// refused as stale and client 2's stands.
    pub fn judge(&self, fenced: bool, text: &TwoClientsText) -> bool {
        let stored = self.stored.as_deref();
        let (shown, lines) = if fenced {
            let refused = self.client_1.is_stale() && stored == Some(self.values[1]);
            (refused && self.client_2.ok(), text.safe)
        } else {
            let both = self.client_1.ok() && self.client_2.ok();
            (both && stored == Some(self.values[0]), text.corrupted)
        };
        match (shown, fenced) {
            (true, _) => lines.iter().for_each(|line| println!("{line}")),
            (false, false) => println!(
                "=> expected the {} write to replace the newer holder's, but it did not",
                text.write
            ),
            (false, true) => println!(
                "=> expected 409 for the {} write and the newer holder's value stored; it got {}",
                text.write, self.client_1.status
            ),
        }
        shown
    }
}
