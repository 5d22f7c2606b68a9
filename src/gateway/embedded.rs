//! The embedded object store that answers behind the gateway when no
//! `--upstream` is given: the quick-start and demo backend, not a product.
//!
//! `PUT` stores the body at the path, `GET`/`HEAD` return it (404 if absent),
//! `DELETE` removes it, `POST` appends the body. It runs on its own loopback
//! listener so that the gateway reaches it through the very same proxy path
//! as any real backend.
//!
//! Every object has a strong `ETag`, new at every write (on disk the file's
//! inode, modification time in nanoseconds and length; in memory a counter),
//! and writes honour RFC 9110's `If-Match` and `If-None-Match`, checked under
//! the object's writer lock, so atomically with the write: the backend of
//! `--conditional-writes http` (docs/CHAINED.md).
//!
//! On disk, each object is one file under `<data-dir>/objects/`, named by its
//! percent-encoded normalised path; a `PUT` writes a temporary file and
//! renames it over the old one, so readers see the old or the new object,
//! never a torn one. Object files are not fsynced: fence durability is the
//! gateway's promise, object durability is the backend's.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use dashmap::DashMap;
use futures_util::StreamExt;
use http::header::{ALLOW, CONTENT_LENGTH, CONTENT_TYPE, ETAG, IF_MATCH, IF_NONE_MATCH};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use tokio::io::AsyncWriteExt;

use crate::key::normalize_path;

/// Everything but these is encoded in file names, so that no path can name a
/// file outside the objects directory.
const FILE_NAME_SET: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// The longest file name most file systems accept.
const MAX_FILE_NAME: usize = 255;

/// Where objects live.
#[derive(Debug, Clone)]
pub enum ObjectStore {
    /// One file per object under this directory.
    Disk(PathBuf),
    /// In memory, gone on restart.
    Memory(Arc<DashMap<String, Bytes>>),
}

#[derive(Clone)]
struct Backend {
    objects: ObjectStore,
    /// Serialises writers of one object (appends must not interleave, and a
    /// write's condition holds until it commits); never shrinks, which is
    /// acceptable for a demo backend.
    locks: Arc<DashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// In memory: each object's version, from a counter that never repeats
    /// within a run.
    versions: Arc<DashMap<String, u64>>,
}

impl ObjectStore {
    /// Objects under `<data_dir>/objects`, created if missing.
    pub fn on_disk(data_dir: &Path) -> std::io::Result<Self> {
        let dir = data_dir.join("objects");
        std::fs::create_dir_all(&dir)?;
        Ok(ObjectStore::Disk(dir))
    }

    /// Objects in memory.
    pub fn in_memory() -> Self {
        ObjectStore::Memory(Arc::default())
    }
}

/// The embedded backend's routes.
pub fn router(objects: ObjectStore) -> Router {
    let backend = Backend {
        objects,
        locks: Arc::default(),
        versions: Arc::default(),
    };
    Router::new().fallback(handle).with_state(backend)
}

async fn handle(State(backend): State<Backend>, request: Request) -> Response {
    let key = match normalize_path(request.uri().path()) {
        Ok(key) => key,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let method = request.method().clone();
    let result = match method {
        Method::GET | Method::HEAD => backend.read(&key, method == Method::HEAD).await,
        Method::PUT | Method::POST => {
            let lock = backend.lock(&key);
            let _writer = lock.lock().await;
            match backend.check_conditions(&key, request.headers()).await {
                Ok(()) => {
                    backend
                        .write(&key, request.into_body(), method == Method::POST)
                        .await
                }
                Err(refused) => Err(refused),
            }
        }
        Method::DELETE => {
            let lock = backend.lock(&key);
            let _writer = lock.lock().await;
            match backend.check_conditions(&key, request.headers()).await {
                Ok(()) => backend.delete(&key).await,
                Err(refused) => Err(refused),
            }
        }
        _ => {
            let mut response = StatusCode::METHOD_NOT_ALLOWED.into_response();
            response.headers_mut().insert(
                ALLOW,
                HeaderValue::from_static("GET, HEAD, PUT, POST, DELETE"),
            );
            Ok(response)
        }
    };
    result.unwrap_or_else(|e| e.into_response())
}

/// A failure answered with its status and a one-line text.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        let status = match e.kind() {
            std::io::ErrorKind::NotFound => StatusCode::NOT_FOUND,
            std::io::ErrorKind::StorageFull => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Failure(status, e.to_string())
    }
}

impl Backend {
    fn lock(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        if let Some(lock) = self.locks.get(key) {
            return Arc::clone(lock.value());
        }
        Arc::clone(self.locks.entry(key.to_owned()).or_default().value())
    }

    /// The object's current `ETag`, `None` if it is absent.
    async fn etag(&self, key: &str) -> Result<Option<String>, Failure> {
        match &self.objects {
            ObjectStore::Memory(objects) => Ok(objects.contains_key(key).then(|| {
                let version = self.versions.get(key).map_or(0, |v| *v.value());
                format!("\"m{version:x}\"")
            })),
            ObjectStore::Disk(dir) => match tokio::fs::metadata(Self::file(dir, key)?).await {
                Ok(metadata) => Ok(Some(disk_etag(&metadata))),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e.into()),
            },
        }
    }

    /// RFC 9110 §13.1.1 and §13.1.2 on a write: 412 unless they hold (`*`
    /// for any current object; a list of tags, compared strongly).
    async fn check_conditions(&self, key: &str, headers: &HeaderMap) -> Result<(), Failure> {
        let if_match = header_text(headers, &IF_MATCH);
        let if_none_match = header_text(headers, &IF_NONE_MATCH);
        if if_match.is_none() && if_none_match.is_none() {
            return Ok(());
        }
        let current = self.etag(key).await?;
        let failed = || {
            Err(Failure(
                StatusCode::PRECONDITION_FAILED,
                "precondition failed".into(),
            ))
        };
        if let Some(list) = if_match {
            let holds = match &current {
                None => false,
                Some(tag) => list.trim() == "*" || tags(&list).any(|t| t == tag),
            };
            if !holds {
                return failed();
            }
        }
        if let Some(list) = if_none_match {
            let holds = match &current {
                None => true,
                Some(tag) => {
                    list.trim() != "*" && tags(&list).all(|t| t.trim_start_matches("W/") != tag)
                }
            };
            if !holds {
                return failed();
            }
        }
        Ok(())
    }

    fn file(dir: &Path, key: &str) -> Result<PathBuf, Failure> {
        let name = utf8_percent_encode(key, FILE_NAME_SET).to_string();
        if name.len() > MAX_FILE_NAME {
            return Err(Failure(
                StatusCode::URI_TOO_LONG,
                "object path too long for the embedded backend".into(),
            ));
        }
        Ok(dir.join(name))
    }

    async fn read(&self, key: &str, head_only: bool) -> Result<Response, Failure> {
        let (length, body) = match &self.objects {
            ObjectStore::Memory(objects) => {
                let data = objects
                    .get(key)
                    .map(|d| d.value().clone())
                    .ok_or_else(|| Failure(StatusCode::NOT_FOUND, "no such object".into()))?;
                (data.len() as u64, Body::from(data))
            }
            ObjectStore::Disk(dir) => {
                let file = tokio::fs::File::open(Self::file(dir, key)?).await?;
                let length = file.metadata().await?.len();
                let body = if head_only {
                    Body::empty()
                } else {
                    Body::from_stream(tokio_util::io::ReaderStream::new(file))
                };
                (length, body)
            }
        };
        let mut response = Response::new(body);
        if let Some(tag) = self.etag(key).await? {
            if let Ok(value) = HeaderValue::from_str(&tag) {
                response.headers_mut().insert(ETAG, value);
            }
        }
        response
            .headers_mut()
            .insert(CONTENT_LENGTH, HeaderValue::from(length));
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        Ok(response)
    }

    async fn write(&self, key: &str, body: Body, append: bool) -> Result<Response, Failure> {
        let mut stream = body.into_data_stream();
        match &self.objects {
            ObjectStore::Memory(objects) => {
                let mut data = Vec::new();
                if append {
                    if let Some(old) = objects.get(key) {
                        data.extend_from_slice(old.value());
                    }
                }
                while let Some(chunk) = stream.next().await {
                    data.extend_from_slice(&chunk.map_err(body_error)?);
                }
                objects.insert(key.to_owned(), Bytes::from(data));
                self.versions.insert(key.to_owned(), next_version());
            }
            ObjectStore::Disk(dir) => {
                let target = Self::file(dir, key)?;
                // Appends go to the object itself; replacements to a temporary
                // file renamed over it once complete.
                let (path, mut file) = if append {
                    let file = tokio::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&target)
                        .await?;
                    (target.clone(), file)
                } else {
                    let tmp = dir.join(format!(".tmp-{}", unique_suffix()));
                    let file = tokio::fs::File::create(&tmp).await?;
                    (tmp, file)
                };
                let copied = async {
                    while let Some(chunk) = stream.next().await {
                        file.write_all(&chunk.map_err(body_error)?).await?;
                    }
                    file.flush().await?;
                    Ok::<_, Failure>(())
                }
                .await;
                drop(file);
                if let Err(e) = copied {
                    if !append {
                        let _ = tokio::fs::remove_file(&path).await;
                    }
                    return Err(e);
                }
                if !append {
                    if let Err(e) = tokio::fs::rename(&path, &target).await {
                        let _ = tokio::fs::remove_file(&path).await;
                        return Err(e.into());
                    }
                }
            }
        }
        let mut response = StatusCode::NO_CONTENT.into_response();
        if let Some(tag) = self.etag(key).await? {
            if let Ok(value) = HeaderValue::from_str(&tag) {
                response.headers_mut().insert(ETAG, value);
            }
        }
        Ok(response)
    }

    async fn delete(&self, key: &str) -> Result<Response, Failure> {
        match &self.objects {
            ObjectStore::Memory(objects) => {
                objects
                    .remove(key)
                    .ok_or_else(|| Failure(StatusCode::NOT_FOUND, "no such object".into()))?;
            }
            ObjectStore::Disk(dir) => tokio::fs::remove_file(Self::file(dir, key)?).await?,
        }
        Ok(StatusCode::NO_CONTENT.into_response())
    }
}

/// A file's `ETag`: a rename makes a new inode, and a write in place moves
/// the modification time, kept to the nanosecond.
fn disk_etag(metadata: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    format!(
        "\"{:x}-{:x}.{:x}-{:x}\"",
        metadata.ino(),
        metadata.mtime(),
        metadata.mtime_nsec(),
        metadata.len()
    )
}

/// The memory store's next version: a process-wide counter, started from
/// the clock so that a restart does not give old tags back.
fn next_version() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static NEXT: OnceLock<AtomicU64> = OnceLock::new();
    let next = NEXT.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        AtomicU64::new(now)
    });
    next.fetch_add(1, Ordering::Relaxed)
}

/// All values of `name`, joined with `,` (a list header), if any.
fn header_text(headers: &HeaderMap, name: &http::HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// The entity tags of a list header (`"a", W/"b"`).
fn tags(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|t| !t.is_empty())
}

fn body_error(e: axum::Error) -> Failure {
    Failure(
        StatusCode::BAD_REQUEST,
        format!("reading the request body: {e}"),
    )
}

fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
