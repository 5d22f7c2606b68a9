//! What may be secret in an option's value (a URL's user-info and
//! query), masked wherever a value is shown: in the effective
//! configuration, in a problem, in a parser's message.

/// `scheme://user:password@host/path?query` with `***` for the user-info
/// and the query: a URL in a configuration may carry either secret.
pub(crate) fn mask(value: &str) -> String {
    let Some(scheme_end) = value.find("://") else {
        return value.to_owned();
    };
    let (scheme, rest) = value.split_at(scheme_end + 3);
    // Everything up to the last `@` may be user-info: a password with an
    // unencoded `/`, `?` or `#` ends the authority early for a strict
    // reader, and must be masked all the same.
    let (masked, rest) = match rest.rfind('@') {
        Some(at) => ("***@", &rest[at + 1..]),
        None => ("", rest),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = format!("{masked}{authority}");
    let tail = match tail.find('?') {
        Some(q) => format!("{}?***", &tail[..q]),
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// A parser's `message` about the option value `raw` (which `delimiter`,
/// if any, splits into the values the parser reads one by one), with each
/// of those values masked and cut wherever the message quotes it: as is,
/// or escaped as Rust's `{:?}` escapes it (a parser that quotes a value
/// with a control character or a quote in it escapes them, and the
/// spelling in the file is then nowhere in the message). `None` if a
/// user-info or query of them is in the message still, however spelled:
/// the message is then not shown at all.
pub(super) fn masked_message(message: &str, raw: &str, delimiter: Option<char>) -> Option<String> {
    let mut values = vec![raw];
    if let Some(delimiter) = delimiter {
        values.extend(raw.split(delimiter));
    }
    // The longest first: the pieces are inside the whole.
    values.sort_by_key(|value| std::cmp::Reverse(value.len()));
    let escaped = |text: &str| {
        let quoted = format!("{text:?}");
        quoted[1..quoted.len() - 1].to_owned()
    };
    let mut message = message.to_owned();
    for value in &values {
        let masked = mask(value);
        let shown = shorten(&masked);
        if value.is_empty() || shown == *value {
            continue;
        }
        message = message
            .replace(&format!("{value:?}"), &format!("{shown:?}"))
            .replace(*value, &shown)
            .replace(&escaped(value), &escaped(&shown))
            .replace(&masked, &shown);
    }
    let secret_left = values
        .iter()
        .flat_map(|value| secret_parts(value))
        .any(|part| {
            !part.is_empty() && (message.contains(part) || message.contains(&escaped(part)))
        });
    (!secret_left).then_some(message)
}

/// What [`mask`] hides of `value`: its user-info (and the password in
/// it) and its query.
pub(super) fn secret_parts(value: &str) -> Vec<&str> {
    let Some((_, rest)) = value.split_once("://") else {
        return Vec::new();
    };
    let mut parts = Vec::new();
    let rest = match rest.rfind('@') {
        Some(at) => {
            let user_info = &rest[..at];
            parts.push(user_info);
            if let Some((_, password)) = user_info.split_once(':') {
                parts.push(password);
            }
            &rest[at + 1..]
        }
        None => rest,
    };
    let tail = &rest[rest.find(['/', '?', '#']).unwrap_or(rest.len())..];
    if let Some((_, query)) = tail.split_once('?') {
        parts.push(query);
    }
    parts
}

/// Whether `value` is a URL whose user-info holds a `/`, `?` or `#`: one
/// reader ends the authority there, another at the last `@`, so the host
/// (and what is secret) cannot be read one way only.
pub(super) fn ambiguous_user_info(value: &str) -> bool {
    let Some((_, rest)) = value.split_once("://") else {
        return false;
    };
    rest.rfind('@')
        .is_some_and(|at| rest[..at].contains(['/', '?', '#']))
}

/// `value` cut to 120 characters for a message: a value may be long.
pub(super) fn shorten(value: &str) -> String {
    match value.char_indices().nth(120) {
        Some((at, _)) => format!("{}... ({} bytes)", &value[..at], value.len()),
        None => value.to_owned(),
    }
}
