//! Loopback servers for the object-storage tests: an S3 server (s3s-fs, in process, serving a
//! directory whose subdirectories are buckets) and a plain HTTP server with range support,
//! both behind a fault injector that fails chosen requests on purpose (error answers, delays,
//! truncated bodies, dropped connections) and logs every request.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tower::ServiceExt;
use zarrpipe::store::StoreOptions;

pub const ACCESS_KEY: &str = "zarrpipe-test";
pub const SECRET_KEY: &str = "zarrpipe-test-secret";
pub const BUCKET: &str = "bucket";

/// What to do to a request.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// Answer with this status and no body.
    Status(u16),
    /// Wait this long before answering normally.
    Delay(Duration),
    /// Send the headers and half of the body, then break the connection.
    Truncate,
    /// Send the headers, then break the connection before any of the body.
    Drop,
}

#[derive(Debug, Default)]
pub struct Faults {
    /// (substring of the request path, fault, how many more times)
    rules: Mutex<Vec<(String, Fault, usize)>>,
    log: Mutex<Vec<String>>,
    requests: AtomicU64,
}

impl Faults {
    /// Fails the next `times` requests whose path contains `path` with `fault`.
    pub fn inject(&self, path: &str, fault: Fault, times: usize) {
        self.rules
            .lock()
            .unwrap()
            .push((path.to_string(), fault, times));
    }

    pub fn clear(&self) {
        self.rules.lock().unwrap().clear();
    }

    /// Requests served so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    /// Every request so far as `METHOD path [range]`.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    fn take(&self, path: &str) -> Option<Fault> {
        let mut rules = self.rules.lock().unwrap();
        let rule = rules
            .iter_mut()
            .find(|(pattern, _, times)| *times > 0 && path.contains(pattern.as_str()))?;
        rule.2 -= 1;
        Some(rule.1)
    }
}

#[derive(Clone)]
enum Backend {
    S3(s3s::service::S3Service),
    Directory(tower_http::services::ServeDir),
}

#[derive(Clone)]
struct Server {
    backend: Backend,
    faults: Arc<Faults>,
}

/// A running loopback server.
pub struct Loopback {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    pub faults: Arc<Faults>,
    /// The directory served (for the S3 server: its buckets).
    pub root: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Loopback {
    /// An S3 server over a fresh directory holding one empty bucket, [`BUCKET`]; `None` (with
    /// a `skipped:` line) where no loopback port can be bound.
    pub async fn s3() -> Option<Self> {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir_all(dir.path().join(BUCKET)).unwrap();
        let fs = s3s_fs::FileSystem::new(dir.path()).expect("s3s-fs over the directory");
        let mut builder = s3s::service::S3ServiceBuilder::new(fs);
        builder.set_auth(s3s::auth::SimpleAuth::from_single(ACCESS_KEY, SECRET_KEY));
        let backend = Backend::S3(builder.build());
        let root = dir.path().to_path_buf();
        Self::start(backend, root, Some(dir)).await
    }

    /// A plain HTTP server (with range requests) over `root`.
    pub async fn http(root: PathBuf) -> Option<Self> {
        let backend = Backend::Directory(tower_http::services::ServeDir::new(&root));
        Self::start(backend, root, None).await
    }

    async fn start(
        backend: Backend,
        root: PathBuf,
        dir: Option<tempfile::TempDir>,
    ) -> Option<Self> {
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            // CI sets ZARRPIPE_REQUIRE_SERVERS so that these tests run there, never skip.
            Err(error) if std::env::var_os("ZARRPIPE_REQUIRE_SERVERS").is_some() => {
                panic!("cannot bind a loopback port for the test server: {error}")
            }
            Err(error) => {
                println!("skipped: cannot bind a loopback port for the test server ({error})");
                return None;
            }
        };
        let address = listener.local_addr().expect("local address");
        let faults = Arc::new(Faults::default());
        let server = Server {
            backend,
            faults: faults.clone(),
        };
        let app = axum::Router::new().fallback(handle).with_state(server);
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        Some(Self {
            endpoint: format!("http://{address}"),
            faults,
            root,
            _dir: dir,
        })
    }

    /// The S3 URL of a key prefix in the bucket.
    pub fn s3_url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The HTTP URL of a path under the served directory.
    pub fn http_url(&self, path: &str) -> String {
        format!("{}/{path}", self.endpoint)
    }

    /// Options that reach this S3 server, with short backoffs for tests.
    pub fn s3_options(&self) -> StoreOptions {
        StoreOptions::new()
            .option("endpoint", self.endpoint.clone())
            .option("region", "us-east-1")
            .option("access_key_id", ACCESS_KEY)
            .option("secret_access_key", SECRET_KEY)
            .backoff(Duration::from_millis(10), Duration::from_millis(100))
    }

    /// Copies a directory tree into the bucket under `prefix`.
    pub fn upload(&self, from: &Path, prefix: &str) {
        super::copy_dir(from, &self.root.join(BUCKET).join(prefix));
        self.register_objects();
    }

    /// Records an ETag for every file in the bucket, as s3s-fs does for objects PUT through
    /// it. Without one, s3s-fs computes the file's MD5 on every GET, ranged or not, which
    /// would make a byte-range read cost as much server time as reading the whole object.
    pub fn register_objects(&self) {
        let bucket = self.root.join(BUCKET);
        let encode = |text: &str| {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
        };
        let mut pending = vec![bucket.clone()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    pending.push(path);
                    continue;
                }
                let key = path.strip_prefix(&bucket).unwrap().to_string_lossy();
                let info = self.root.join(format!(
                    ".bucket-{}.object-{}.internal.json",
                    encode(BUCKET),
                    encode(&key)
                ));
                if info.exists() {
                    continue;
                }
                let bytes = std::fs::read(&path).unwrap();
                let e_tag = format!("{:08x}{:024x}", crc32c::crc32c(&bytes), bytes.len());
                std::fs::write(info, serde_json::json!({ "e_tag": e_tag }).to_string()).unwrap();
            }
        }
    }
}

async fn handle(State(server): State<Server>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let range = request
        .headers()
        .get("range")
        .and_then(|range| range.to_str().ok())
        .map(|range| format!(" {range}"))
        .unwrap_or_default();
    server.faults.requests.fetch_add(1, Ordering::SeqCst);
    server
        .faults
        .log
        .lock()
        .unwrap()
        .push(format!("{} {path}{range}", request.method()));
    let fault = server.faults.take(&path);
    match fault {
        Some(Fault::Status(code)) => {
            return StatusCode::from_u16(code).unwrap().into_response();
        }
        Some(Fault::Delay(delay)) => tokio::time::sleep(delay).await,
        _ => {}
    }
    let response = match server.backend {
        Backend::S3(service) => match service.oneshot(request).await {
            Ok(response) => end_at_content_length(response.map(Body::new)),
            Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        },
        Backend::Directory(directory) => {
            let response: Result<_, Infallible> = directory.oneshot(request).await;
            response.unwrap().map(Body::new)
        }
    };
    match fault {
        Some(Fault::Truncate) => cut_body(response, |length| length / 2).await,
        Some(Fault::Drop) => cut_body(response, |_| 0).await,
        _ => response,
    }
}

/// The response with its full Content-Length but only `keep(length)` bytes of body, then a
/// broken connection.
async fn cut_body(response: Response, keep: impl Fn(usize) -> usize) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    parts
        .headers
        .insert("content-length", HeaderValue::from(bytes.len()));
    let kept = bytes.slice(..keep(bytes.len()));
    let stream = futures::stream::iter([
        Ok(kept),
        Err(std::io::Error::other("fault injected: connection broken")),
    ]);
    Response::from_parts(parts, Body::from_stream(stream))
}

/// Ends the body once its Content-Length is sent. s3s-fs 0.14 answers a range request by
/// reading the file on to its end (sending nothing more), so a small range at the start of a
/// large shard would cost the server as much as the whole shard; real S3 servers stop.
fn end_at_content_length(response: Response) -> Response {
    let Some(length) = response
        .headers()
        .get("content-length")
        .and_then(|value| value.to_str().ok()?.parse::<usize>().ok())
    else {
        return response;
    };
    let (parts, body) = response.into_parts();
    let stream = futures::stream::unfold(
        (body.into_data_stream(), length),
        |(mut inner, remaining)| async move {
            use futures::StreamExt;
            if remaining == 0 {
                return None;
            }
            match inner.next().await? {
                Ok(bytes) => {
                    let bytes = bytes.slice(..bytes.len().min(remaining));
                    let remaining = remaining - bytes.len();
                    Some((Ok(bytes), (inner, remaining)))
                }
                Err(error) => Some((Err(error), (inner, 0))),
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(stream))
}
