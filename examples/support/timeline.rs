//! What every actor did, from any thread, drawn as an ASCII sequence diagram:
//! time runs down, one column (lane) per actor.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The rendered diagram is at most this wide.
pub const WIDTH: usize = 100;
/// Width of the time column on the left.
const TIME_COL: usize = 9;
/// A quiet stretch longer than this gets an empty row, so that long waits
/// are visible at a glance.
const GAP: Duration = Duration::from_millis(120);

/// One actor's column in the diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lane(usize);

/// How an event is drawn on its lane.
#[derive(Debug)]
enum Mark {
    /// Something the lane did or saw on its own: `o`.
    Note,
    /// A message to another lane; a refusal has an `X` on the sender.
    Msg { to: Lane, refused: bool },
    /// `#`: from here on the lifeline is frozen (`~`), or runs again.
    Pause { frozen: bool },
}

#[derive(Debug)]
struct Event {
    at: Duration,
    seq: usize,
    lane: Lane,
    mark: Mark,
    text: String,
}

#[derive(Debug)]
struct Inner {
    start: Instant,
    lanes: Vec<String>,
    events: Mutex<Vec<Event>>,
}

/// Collects events from every actor (any thread) and renders them.
#[derive(Debug, Clone)]
pub struct Timeline {
    inner: Arc<Inner>,
}

impl Timeline {
    /// A timeline with these lanes, left to right; time 0 is now.
    pub fn new(lanes: &[&str]) -> Self {
        let lanes = lanes.iter().map(|l| (*l).to_owned()).collect();
        let events = Mutex::new(Vec::new());
        let inner = Inner {
            start: Instant::now(),
            lanes,
            events,
        };
        Timeline {
            inner: Arc::new(inner),
        }
    }

    /// The lane named `name`, if the timeline has one.
    pub fn find_lane(&self, name: &str) -> Option<Lane> {
        self.inner.lanes.iter().position(|l| l == name).map(Lane)
    }

    /// The lane named `name`; panics if there is none (the names are the
    /// demo's own constants, so that is a bug in the demo).
    pub fn lane(&self, name: &str) -> Lane {
        self.find_lane(name)
            .unwrap_or_else(|| panic!("timeline has no lane {name:?}"))
    }

    /// A lane's name.
    pub fn name(&self, lane: Lane) -> &str {
        &self.inner.lanes[lane.0]
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // A panicking actor must not hide the rest of the timeline.
        let events = self.inner.events.lock();
        events.unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push(&self, at: Instant, lane: Lane, mark: Mark, text: impl Into<String>) {
        let at = at.saturating_duration_since(self.inner.start);
        let mut events = self.events();
        let seq = events.len();
        let text = text.into();
        events.push(Event {
            at,
            seq,
            lane,
            mark,
            text,
        });
    }

    /// Something `lane` did or saw, now.
    pub fn note(&self, lane: Lane, text: impl Into<String>) {
        self.note_at(Instant::now(), lane, text);
    }

    /// Something that happened at `at`, possibly noticed only later (a lease
    /// running out, a worker process's report).
    pub fn note_at(&self, at: Instant, lane: Lane, text: impl Into<String>) {
        self.push(at, lane, Mark::Note, text);
    }

    /// A message from one actor to another, now.
    pub fn msg(&self, from: Lane, to: Lane, text: impl Into<String>) {
        self.msg_at(Instant::now(), from, to, text, false);
    }

    /// A refusal sent by `from`, now.
    pub fn refused(&self, from: Lane, to: Lane, text: impl Into<String>) {
        self.msg_at(Instant::now(), from, to, text, true);
    }

    /// A message (a refusal, if `refused`) that was sent at `at`.
    pub fn msg_at(
        &self,
        at: Instant,
        from: Lane,
        to: Lane,
        text: impl Into<String>,
        refused: bool,
    ) {
        self.push(at, from, Mark::Msg { to, refused }, text);
    }

    /// `lane` freezes: its lifeline is drawn `~` until [`Timeline::pause_end`].
    pub fn pause_begin(&self, lane: Lane, text: impl Into<String>) {
        self.push(Instant::now(), lane, Mark::Pause { frozen: true }, text);
    }

    /// `lane` runs again.
    pub fn pause_end(&self, lane: Lane, text: impl Into<String>) {
        self.push(Instant::now(), lane, Mark::Pause { frozen: false }, text);
    }

    /// The ASCII sequence diagram.
    pub fn render(&self) -> String {
        let n = self.inner.lanes.len();
        let lane_width = (WIDTH - TIME_COL) / n.max(1);
        let center = |lane: Lane| TIME_COL + lane.0 * lane_width + lane_width / 2;
        let mut out = String::new();
        let (mut header, mut rule) = (blank(), blank());
        put(&mut header, 0, "   t (ms)");
        for (i, name) in self.inner.lanes.iter().enumerate() {
            let start = center(Lane(i)).saturating_sub(name.len() / 2);
            put(&mut header, start, name);
            put(&mut rule, start, &"=".repeat(name.len()));
        }
        push_row(&mut out, header);
        push_row(&mut out, rule);

        let mut events = self.events();
        events.sort_by_key(|e| (e.at, e.seq));
        let mut frozen = vec![false; n];
        let lifelines = |frozen: &[bool]| {
            let mut row = blank();
            for (i, &frozen) in frozen.iter().enumerate() {
                row[center(Lane(i))] = if frozen { '~' } else { '|' };
            }
            row
        };
        let mut last: Option<Duration> = None;
        for event in events.iter() {
            if last.is_some_and(|last| event.at.saturating_sub(last) > GAP) {
                let mut row = lifelines(&frozen);
                put(&mut row, 0, "      .");
                push_row(&mut out, row);
            }
            last = Some(event.at);
            let mut row = lifelines(&frozen);
            put(&mut row, 0, &format!("{:>7}  ", event.at.as_millis()));
            let x = center(event.lane);
            match event.mark {
                Mark::Note => {
                    row[x] = 'o';
                    place_note(&mut row, x, &event.text);
                }
                Mark::Pause { frozen: now } => {
                    row[x] = '#';
                    place_note(&mut row, x, &event.text);
                    frozen[event.lane.0] = now;
                }
                Mark::Msg { to, refused } => {
                    place_arrow(&mut row, x, center(to), &event.text, refused)
                }
            }
            push_row(&mut out, row);
        }
        out
    }
}

/// What the symbols in a rendered timeline mean.
pub fn legend() -> &'static str {
    "legend: ---> message   o event   # pause starts/ends   ~ frozen lifeline   X refusal"
}

fn blank() -> Vec<char> {
    vec![' '; WIDTH]
}

fn put(row: &mut Vec<char>, start: usize, text: &str) {
    for (i, c) in text.chars().enumerate() {
        let x = start + i;
        if x >= row.len() {
            row.resize(x + 1, ' ');
        }
        row[x] = c;
    }
}

fn push_row(out: &mut String, row: Vec<char>) {
    let line: String = row.into_iter().collect();
    out.push_str(line.trim_end());
    out.push('\n');
}

/// Text next to a lane: to its right if it fits, else to its left.
fn place_note(row: &mut Vec<char>, center: usize, text: &str) {
    let len = text.chars().count();
    let start = if center + 2 + len <= WIDTH {
        center + 2
    } else if center >= TIME_COL + len + 2 {
        center - 1 - len
    } else {
        WIDTH.saturating_sub(len).max(TIME_COL)
    };
    put(row, start, text);
}

/// An arrow between two lanes, its label on it if it fits, else beside it.
fn place_arrow(row: &mut Vec<char>, from: usize, to: usize, text: &str, refused: bool) {
    let (lo, hi) = (from.min(to), from.max(to));
    for cell in &mut row[lo + 1..hi] {
        *cell = '-';
    }
    if to > from {
        row[hi - 1] = '>';
    } else {
        row[lo + 1] = '<';
    }
    if refused {
        row[from] = 'X';
    }
    let interior = hi - lo - 1;
    let label = format!(" {text} ");
    let len = label.chars().count();
    if len + 4 <= interior {
        put(row, lo + 1 + (interior - len) / 2, &label);
        return;
    }
    let len = text.chars().count();
    if hi + 2 + len <= WIDTH {
        put(row, hi + 2, text);
    } else if lo >= TIME_COL + len + 2 {
        put(row, lo - 1 - len, text);
    } else {
        put(row, lo + 2, text);
    }
}
