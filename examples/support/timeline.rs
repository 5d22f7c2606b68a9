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
    /// `o`: something the lane did or saw on its own.
    Note,
    /// An arrow to another lane; a refusal (`true`) has an `X` at its start.
    Msg(Lane, bool),
    /// `#`: the lifeline is frozen (`~`) from here on (`true`), or runs again.
    Pause(bool),
}

/// When (since the start), in which order it was recorded, on which lane,
/// how it is drawn, and its text.
type Event = (Duration, usize, Lane, Mark, String);

/// Collects events from every actor (any thread) and renders them.
#[derive(Debug, Clone)]
pub struct Timeline {
    start: Instant,
    lanes: Arc<Vec<String>>,
    events: Arc<Mutex<Vec<Event>>>,
}

impl Timeline {
    /// A timeline with these lanes, left to right; time 0 is now.
    pub fn new(lanes: &[&str]) -> Self {
        let lanes = Arc::new(lanes.iter().map(|l| (*l).to_owned()).collect());
        let (start, events) = (Instant::now(), Arc::default());
        Timeline {
            start,
            lanes,
            events,
        }
    }

    /// The lane named `name`, if the timeline has one.
    pub fn find_lane(&self, name: &str) -> Option<Lane> {
        self.lanes.iter().position(|l| l == name).map(Lane)
    }

    /// The lane named `name`; panics if there is none (the names are the
    /// demo's own constants, so that is a bug in the demo).
    pub fn lane(&self, name: &str) -> Lane {
        let lane = self.find_lane(name);
        lane.unwrap_or_else(|| panic!("timeline has no lane {name:?}"))
    }

    /// A lane's name.
    pub fn name(&self, lane: Lane) -> &str {
        &self.lanes[lane.0]
    }

    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // A panicking actor must not hide the rest of the timeline.
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, at: Instant, lane: Lane, mark: Mark, text: impl Into<String>) {
        let at = at.saturating_duration_since(self.start);
        let mut events = self.events();
        let seq = events.len();
        events.push((at, seq, lane, mark, text.into()));
    }

    /// Something `lane` did or saw, now.
    pub fn note(&self, lane: Lane, text: impl Into<String>) {
        self.push(Instant::now(), lane, Mark::Note, text);
    }

    /// Something that happened at `at`, possibly learned only later (a lease
    /// running out, a worker process's report).
    pub fn note_at(&self, at: Instant, lane: Lane, text: impl Into<String>) {
        self.push(at, lane, Mark::Note, text);
    }

    /// A message from one actor to another, now.
    pub fn msg(&self, from: Lane, to: Lane, text: impl Into<String>) {
        self.push(Instant::now(), from, Mark::Msg(to, false), text);
    }

    /// A message (a refusal, if `refused`) that was sent at `at`.
    pub fn msg_at(&self, at: Instant, from: Lane, to: Lane, text: String, refused: bool) {
        self.push(at, from, Mark::Msg(to, refused), text);
    }

    /// `lane` freezes: its lifeline is drawn `~` until [`Timeline::pause_end`].
    pub fn pause_begin(&self, lane: Lane, text: impl Into<String>) {
        self.push(Instant::now(), lane, Mark::Pause(true), text);
    }

    /// `lane` runs again.
    pub fn pause_end(&self, lane: Lane, text: impl Into<String>) {
        self.push(Instant::now(), lane, Mark::Pause(false), text);
    }

    /// The ASCII sequence diagram.
    pub fn render(&self) -> String {
        let lane_width = (WIDTH - TIME_COL) / self.lanes.len().max(1);
        let center = |lane: Lane| TIME_COL + lane.0 * lane_width + lane_width / 2;
        let mut out = String::new();
        let (mut header, mut rule) = (blank(), blank());
        put(&mut header, 0, "   t (ms)");
        for (i, name) in self.lanes.iter().enumerate() {
            let start = center(Lane(i)).saturating_sub(name.len() / 2);
            put(&mut header, start, name);
            put(&mut rule, start, &"=".repeat(name.len()));
        }
        push_row(&mut out, header);
        push_row(&mut out, rule);

        let mut frozen = vec![false; self.lanes.len()];
        let lifelines = |frozen: &[bool]| {
            let mut row = blank();
            for (i, &frozen) in frozen.iter().enumerate() {
                row[center(Lane(i))] = if frozen { '~' } else { '|' };
            }
            row
        };
        let mut events = self.events();
        events.sort_by_key(|e| (e.0, e.1));
        let mut last: Option<Duration> = None;
        for (at, _, lane, mark, text) in events.iter() {
            if last.is_some_and(|last| at.saturating_sub(last) > GAP) {
                let mut row = lifelines(&frozen);
                put(&mut row, 0, "      .");
                push_row(&mut out, row);
            }
            last = Some(*at);
            let mut row = lifelines(&frozen);
            put(&mut row, 0, &format!("{:>7}  ", at.as_millis()));
            let x = center(*lane);
            match *mark {
                Mark::Msg(to, refused) => place_arrow(&mut row, x, center(to), text, refused),
                Mark::Note | Mark::Pause(_) => {
                    row[x] = if matches!(mark, Mark::Note) { 'o' } else { '#' };
                    place_note(&mut row, x, text);
                }
            }
            if let Mark::Pause(now) = *mark {
                frozen[lane.0] = now;
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
        if start + i >= row.len() {
            row.resize(start + i + 1, ' ');
        }
        row[start + i] = c;
    }
}

fn push_row(out: &mut String, row: Vec<char>) {
    let line: String = row.into_iter().collect();
    out.push_str(line.trim_end());
    out.push('\n');
}

/// Where text of `len` characters starts beside a span: right of
/// `right_of` if it fits, else left of `left_of`, else at `otherwise`.
fn beside(right_of: usize, left_of: usize, len: usize, otherwise: usize) -> usize {
    if right_of + 2 + len <= WIDTH {
        right_of + 2
    } else if left_of >= TIME_COL + len + 2 {
        left_of - 1 - len
    } else {
        otherwise
    }
}

/// Text next to a lane.
fn place_note(row: &mut Vec<char>, center: usize, text: &str) {
    let len = text.chars().count();
    let start = beside(center, center, len, WIDTH.saturating_sub(len).max(TIME_COL));
    put(row, start, text);
}

/// An arrow between two lanes, its label on it if it fits, else beside it.
fn place_arrow(row: &mut Vec<char>, from: usize, to: usize, text: &str, refused: bool) {
    let (lo, hi) = (from.min(to), from.max(to));
    row[lo + 1..hi].fill('-');
    match to > from {
        true => row[hi - 1] = '>',
        false => row[lo + 1] = '<',
    }
    if refused {
        row[from] = 'X';
    }
    let interior = hi - lo - 1;
    let label = format!(" {text} ");
    let len = label.chars().count();
    if len + 4 <= interior {
        return put(row, lo + 1 + (interior - len) / 2, &label);
    }
    put(row, beside(hi, lo, text.chars().count(), lo + 2), text);
}
