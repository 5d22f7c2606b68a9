//! The list of writes that reach beyond their path, in `docs/BEYOND.md`, is
//! this test's input: every row of its table is built as a request and
//! checked against the gateway's key derivation (`fencegate::reach`), so the
//! documentation cannot say one thing while the gateway does another.

use fencegate::reach::{listed_objects, reach, ReachError, Rules};
use fencegate::Scope;
use http::Request;

/// The text between each pair of backticks in `cell`.
fn quoted(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

struct Row {
    line: String,
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    rules: Rules,
    expected: Result<Vec<String>, &'static str>,
}

fn rows() -> Vec<Row> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/BEYOND.md"))
        .expect("docs/BEYOND.md");
    let list = doc
        .split("## The list")
        .nth(1)
        .expect("a section '## The list'");
    let mut rows = Vec::new();
    for line in list.lines().filter(|line| line.starts_with("| ")) {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if cells[0] == "store" {
            continue;
        }
        assert_eq!(cells.len(), 5, "five cells in {line}");
        let request = quoted(cells[1]);
        let (method, target) = request[0].split_once(' ').expect("METHOD TARGET");
        let (headers, body) = match cells[2].strip_prefix("body ") {
            Some(body) => (Vec::new(), Some(quoted(body)[0].to_owned())),
            None => (
                quoted(cells[2])
                    .iter()
                    .map(|header| {
                        let (name, value) = header.split_once(": ").expect("Name: value");
                        (name.to_owned(), value.to_owned())
                    })
                    .collect(),
                None,
            ),
        };
        let mut rules = Rules {
            scope: Scope::Path,
            flat_keys: false,
        };
        for option in quoted(cells[3]) {
            match option.split_once(' ') {
                None if option == "--flat-keys" => rules.flat_keys = true,
                Some(("--scope", scope)) => rules.scope = scope.parse().expect("a scope"),
                _ => panic!("unknown option {option} in {line}"),
            }
        }
        let expected = match cells[4] {
            "unfenceable_write" => Err("unfenceable_write"),
            "invalid_path" => Err("invalid_path"),
            keys => Ok(quoted(keys).iter().map(|key| (*key).to_owned()).collect()),
        };
        rows.push(Row {
            line: line.to_owned(),
            method: method.to_owned(),
            target: target.to_owned(),
            headers,
            body,
            rules,
            expected,
        });
    }
    rows
}

#[test]
fn every_row_of_the_documented_list_holds() {
    let rows = rows();
    assert!(rows.len() >= 25, "the list has {} rows", rows.len());
    for row in rows {
        let mut request = Request::builder()
            .method(row.method.as_str())
            .uri(&row.target);
        for (name, value) in &row.headers {
            request = request.header(name, value);
        }
        let request = request.body(()).expect("a request");
        let listed = match row
            .body
            .as_deref()
            .map(|body| listed_objects(body.as_bytes()))
        {
            Some(Err(_)) => {
                assert_eq!(row.expected, Err("unfenceable_write"), "{}", row.line);
                continue;
            }
            Some(Ok(listed)) => Some(listed),
            None => None,
        };
        let found = match reach(&request, &row.rules, listed.as_ref()) {
            Ok(reached) => Ok(reached.keys),
            Err(ReachError::Unfenceable(_)) => Err("unfenceable_write"),
            Err(ReachError::Path(_) | ReachError::Host(_)) => Err("invalid_path"),
        };
        assert_eq!(found, row.expected, "{}", row.line);
    }
}
