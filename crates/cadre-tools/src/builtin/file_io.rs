//! File reading and writing shared by `read_file`, `write_file` and `edit_file`.

use crate::context::FileStamp;
use crate::ToolError;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// How far into a file to look for a NUL byte when deciding it is binary.
const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// Makes temp file names unique within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Runs blocking file work off the async threads.
pub(crate) async fn blocking<T, F>(work: F) -> Result<T, ToolError>
where
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(ToolError::Task)?
}

/// Wraps an I/O error with the workspace-relative path the model knows.
pub(crate) fn io_error(shown: &str, source: std::io::Error) -> ToolError {
    ToolError::Io {
        path: shown.to_string(),
        source,
    }
}

/// A file's bytes and the stamp of exactly what was read.
pub(crate) struct FileBytes {
    /// The whole file.
    pub bytes: Vec<u8>,
    /// mtime and content hash of what was read.
    pub stamp: FileStamp,
}

/// A text file's content and the stamp of exactly what was read.
pub(crate) struct TextFile {
    /// The whole file, valid UTF-8.
    pub text: String,
    /// mtime and content hash of what was read.
    pub stamp: FileStamp,
}

/// What a file that is neither a regular file nor a folder is, in words.
fn special_kind(file_type: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_file() || file_type.is_dir() {
        None
    } else if file_type.is_fifo() {
        Some("a named pipe")
    } else if file_type.is_socket() {
        Some("a socket")
    } else if file_type.is_char_device() {
        Some("a character device")
    } else if file_type.is_block_device() {
        Some("a block device")
    } else {
        Some("a special file")
    }
}

/// Refuses a named pipe, socket or device: opening or reading one can block forever (or
/// worse), and none holds text to work on.
pub(crate) fn ensure_not_special(
    shown: &str,
    file_type: std::fs::FileType,
) -> Result<(), ToolError> {
    match special_kind(file_type) {
        None => Ok(()),
        Some(kind) => Err(ToolError::refused(format!(
            "{shown} is {kind}, not a regular file; read_file, write_file and edit_file only \
             work on regular files"
        ))),
    }
}

/// Reads all of `abs`, refusing anything but a regular file and files over `max_bytes`.
pub(crate) fn read_bytes(abs: &Path, shown: &str, max_bytes: u64) -> Result<FileBytes, ToolError> {
    use std::os::unix::fs::OpenOptionsExt;
    let folder = || {
        ToolError::refused(format!(
            "{shown} is a folder, not a file; use list_files to see what it holds"
        ))
    };
    // `abs` is already resolved, so this is the symlink's target, not the link.
    let meta = std::fs::metadata(abs).map_err(|e| io_error(shown, e))?;
    if meta.is_dir() {
        return Err(folder());
    }
    ensure_not_special(shown, meta.file_type())?;
    if meta.len() > max_bytes {
        return Err(ToolError::refused(format!(
            "{shown} is {} bytes, over the {max_bytes}-byte limit for reading a whole file; \
             use grep to find the part you need, or bash (e.g. `sed -n '100,200p'`) to read a slice",
            meta.len()
        )));
    }
    // Non-blocking, so a named pipe swapped in since the check cannot hang the open; it is
    // caught by the check of what was actually opened below. Regular files ignore the flag.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(abs)
        .map_err(|e| io_error(shown, e))?;
    let opened = file.metadata().map_err(|e| io_error(shown, e))?;
    if opened.is_dir() {
        return Err(folder());
    }
    ensure_not_special(shown, opened.file_type())?;
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    // Read one byte past the limit so a file that grew since the stat is still caught.
    (&file)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(shown, e))?;
    if bytes.len() as u64 > max_bytes {
        return Err(ToolError::refused(format!(
            "{shown} is over the {max_bytes}-byte limit for reading a whole file; \
             use grep or bash to read part of it"
        )));
    }
    let mtime = file
        .metadata()
        .and_then(|m| m.modified())
        .map_err(|e| io_error(shown, e))?;
    let stamp = FileStamp::of(mtime, &bytes);
    Ok(FileBytes { bytes, stamp })
}

/// Reads `abs` as UTF-8 text, refusing folders, special files, files over `max_bytes`,
/// binary and non-UTF-8.
pub(crate) fn read_text(abs: &Path, shown: &str, max_bytes: u64) -> Result<TextFile, ToolError> {
    decode_text(read_bytes(abs, shown, max_bytes)?, shown)
}

/// `file` as UTF-8 text, refusing binary (NUL bytes) and non-UTF-8 content.
pub(crate) fn decode_text(file: FileBytes, shown: &str) -> Result<TextFile, ToolError> {
    let FileBytes { bytes, stamp } = file;
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return Err(ToolError::refused(format!(
            "{shown} looks like a binary file (it has NUL bytes); read_file only reads text. \
             Use bash (e.g. `file`, `xxd | head`) to inspect it"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        ToolError::refused(format!(
            "{shown} is not valid UTF-8 (first bad byte at offset {}); read_file and edit_file \
             only handle UTF-8 text. Use bash (e.g. `iconv`, `xxd`) to inspect or convert it",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok(TextFile { text, stamp })
}

/// What the agent last saw of an existing file it is about to change (`doing`, e.g.
/// "editing"), or a refusal telling it to read the file first.
pub(crate) fn require_seen(
    seen: Option<FileStamp>,
    shown: &str,
    doing: &str,
) -> Result<FileStamp, ToolError> {
    seen.ok_or_else(|| ToolError::refused(format!("read {shown} with read_file before {doing} it")))
}

/// Reads `abs` and refuses unless it is still what the agent saw (`seen`), so a change made
/// since by another agent or a command is never overwritten unseen.
///
/// Call it under the path's lock, and keep holding the lock until the write is done.
pub(crate) fn read_unchanged(
    abs: &Path,
    shown: &str,
    max_bytes: u64,
    seen: &FileStamp,
    doing: &str,
) -> Result<FileBytes, ToolError> {
    let current = read_bytes(abs, shown, max_bytes)?;
    if !seen.matches(&current.stamp) {
        return Err(ToolError::refused(format!(
            "{shown} changed since you last read it (another agent or a command edited it); \
             read it again before {doing} it"
        )));
    }
    Ok(current)
}

/// Writes `bytes` to `abs` via a temp file in the same folder and a rename, so readers never
/// see half a file; keeps the old file's permissions. Returns whether the file existed.
pub(crate) fn write_atomic(abs: &Path, shown: &str, bytes: &[u8]) -> Result<bool, ToolError> {
    let parent = abs
        .parent()
        .ok_or_else(|| ToolError::refused(format!("{shown} has no parent folder")))?;
    std::fs::create_dir_all(parent).map_err(|e| io_error(shown, e))?;
    let old = match std::fs::metadata(abs) {
        Ok(meta) if meta.is_dir() => {
            return Err(ToolError::refused(format!(
                "{shown} is a folder; give a file path"
            )))
        }
        Ok(meta) => {
            ensure_not_special(shown, meta.file_type())?;
            Some(meta)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(shown, e)),
    };
    let name = abs
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = parent.join(format!(
        ".{name}.cadre-tmp-{}-{}",
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = write_then_rename(&temp, abs, bytes, old.as_ref());
    if result.is_err() {
        // Best effort: the temp file is ours and useless now.
        let _ = std::fs::remove_file(&temp);
    }
    result.map_err(|e| io_error(shown, e))?;
    Ok(old.is_some())
}

fn write_then_rename(
    temp: &Path,
    target: &Path,
    bytes: &[u8],
    old: Option<&std::fs::Metadata>,
) -> std::io::Result<()> {
    let mut file = std::fs::File::create_new(temp)?;
    file.write_all(bytes)?;
    if let Some(old) = old {
        file.set_permissions(old.permissions())?;
    }
    drop(file);
    std::fs::rename(temp, target)
}

/// The stamp of `abs` right after this process wrote `bytes` to it.
pub(crate) fn stamp_written(abs: &Path, shown: &str, bytes: &[u8]) -> Result<FileStamp, ToolError> {
    let mtime = std::fs::metadata(abs)
        .and_then(|m| m.modified())
        .map_err(|e| io_error(shown, e))?;
    Ok(FileStamp::of(mtime, bytes))
}

/// Number of lines in `text`, counting a last line without a newline.
pub(crate) fn line_count(text: &str) -> usize {
    text.lines().count()
}
