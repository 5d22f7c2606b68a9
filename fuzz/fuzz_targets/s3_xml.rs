//! The S3 `DeleteObjects` reader, against a second XML reader: whatever
//! keys the gateway reads from a body (and so fences and authorises), a
//! store reading the same bytes with another parser must read the same,
//! in the same order (a key read differently is an object deleted under
//! another key's fence: S3 deny-by-default issue, item 3).
//!
//! The second reader is quick-xml, reading as a store does: the text of
//! each `<Key>` of each `<Object>` of the root `<Delete>`, every text and
//! CDATA piece in it, entities unescaped. The gateway's reader refuses
//! much that this one takes (a DTD, a comment inside a key, a raw CR),
//! and this one refuses some of what the gateway takes (`</:Delete>`); a
//! body either refuses is harmless (the gateway forwards nothing, or the
//! store deletes nothing), so only bodies both read are compared.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;
use quick_xml::Reader;

/// The keys quick-xml reads, or why it cannot.
fn store_reads(body: &[u8]) -> Result<Vec<String>, String> {
    let mut reader = Reader::from_reader(body);
    reader.config_mut().trim_text(false);
    reader.config_mut().check_end_names = true;
    let mut path: Vec<Vec<u8>> = Vec::new();
    let mut keys = Vec::new();
    let mut key: Option<String> = None;
    let mut buf = Vec::new();
    loop {
        let event = reader.read_event_into(&mut buf).map_err(|e| e.to_string())?;
        let in_key = path.len() == 3 && path[2] == b"Key";
        match event {
            Event::Start(start) => {
                let name = start.local_name().as_ref().to_vec();
                if path.len() == 2 && path[1] == b"Object" && name == b"Key" {
                    key = Some(String::new());
                }
                path.push(name);
            }
            Event::End(_) => {
                if in_key {
                    keys.push(key.take().unwrap_or_default());
                }
                path.pop();
            }
            Event::Text(text) if in_key => {
                let text = text.unescape().map_err(|e| e.to_string())?;
                key.get_or_insert_with(String::new).push_str(&text);
            }
            Event::CData(cdata) if in_key => {
                let raw = cdata.into_inner();
                let text = std::str::from_utf8(&raw).map_err(|e| e.to_string())?;
                key.get_or_insert_with(String::new).push_str(text);
            }
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(keys)
}

fuzz_target!(|body: &[u8]| {
    let Ok(ours) = fencegate::reach::listed_objects(body) else {
        return;
    };
    // A body the store refuses deletes nothing: only two readings of one
    // accepted body can disagree on what is deleted.
    let Ok(theirs) = store_reads(body) else {
        return;
    };
    assert_eq!(
        ours.0,
        theirs,
        "the gateway and quick-xml read different keys from {:?}",
        String::from_utf8_lossy(body)
    );
});
