//! Recording: a [`Model`] that passes every request to another model and appends each
//! successful exchange to a cassette (see [`crate::cassette`] for the format).

use crate::cassette::{CassetteHeader, Exchange};
use crate::{EventSink, Model, ModelError, Request, Response};
use async_trait::async_trait;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Wraps a model and records every successful exchange to a cassette file.
///
/// Each exchange is written as one whole line with one write under a lock, then flushed,
/// as soon as its response arrives, so concurrent agents never interleave lines and a crash
/// leaves every earlier line intact. Failed calls are not recorded.
pub struct RecordingModel {
    inner: Arc<dyn Model>,
    path: PathBuf,
    file: Mutex<File>,
    recorded: AtomicUsize,
}

impl fmt::Debug for RecordingModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingModel")
            .field("inner", &self.inner.provider())
            .field("path", &self.path)
            .field("recorded", &self.recorded())
            .finish_non_exhaustive()
    }
}

impl RecordingModel {
    /// Creates (or truncates) the cassette at `path`, writes its header, and wraps `inner`.
    pub fn create(path: impl AsRef<Path>, inner: Arc<dyn Model>) -> Result<Self, ModelError> {
        Self::create_for_run(path, inner, None)
    }

    /// Like [`RecordingModel::create`], noting in the header the id of the run it records.
    pub fn create_for_run(
        path: impl AsRef<Path>,
        inner: Arc<dyn Model>,
        run_id: Option<&str>,
    ) -> Result<Self, ModelError> {
        let path = path.as_ref().to_path_buf();
        let fail = |source: std::io::Error| ModelError::Cassette {
            what: format!(
                "recording: the cassette {} could not be created",
                path.display()
            ),
            source: Box::new(source),
        };
        let mut file = File::create(&path).map_err(fail)?;
        let header = CassetteHeader {
            server_compaction: inner.server_compaction(),
            run_id: run_id.map(str::to_owned),
            ..CassetteHeader::default()
        };
        let mut line = serde_json::to_string(&header).map_err(|source| ModelError::Cassette {
            what: "recording: the cassette header could not be encoded".into(),
            source: Box::new(source),
        })?;
        line.push('\n');
        file.write_all(line.as_bytes()).map_err(fail)?;
        file.flush().map_err(fail)?;
        Ok(Self {
            inner,
            path,
            file: Mutex::new(file),
            recorded: AtomicUsize::new(0),
        })
    }

    /// Where the cassette is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many exchanges were recorded so far.
    pub fn recorded(&self) -> usize {
        self.recorded.load(Ordering::SeqCst)
    }

    fn append(&self, exchange: &Exchange) -> Result<(), ModelError> {
        let mut line = serde_json::to_string(exchange).map_err(|source| ModelError::Cassette {
            what: format!(
                "recording: an exchange of agent {} could not be encoded",
                exchange.agent
            ),
            source: Box::new(source),
        })?;
        line.push('\n');
        // A poisoned lock only means another writer panicked; the file is still whole lines.
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .map_err(|source| ModelError::Cassette {
                what: format!(
                    "recording: the cassette {} could not be written",
                    self.path.display()
                ),
                source: Box::new(source),
            })?;
        self.recorded.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[async_trait]
impl Model for RecordingModel {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn server_compaction(&self) -> bool {
        self.inner.server_compaction()
    }

    async fn send(&self, request: Request, events: EventSink<'_>) -> Result<Response, ModelError> {
        // Keep what the cassette needs before the request moves into the inner model.
        let kept = request.clone();
        let response = self.inner.send(request, events).await?;
        let exchange = Exchange::new(&kept, response);
        // A recording that silently misses an exchange could never be replayed: fail loudly.
        self.append(&exchange)?;
        Ok(exchange.response)
    }

    async fn context_window(&self, model: &str) -> Option<u64> {
        self.inner.context_window(model).await
    }
}
