//! Reads of a local store's files straight into [`ReadMemory`] buffers (object_store's local
//! backend reads into memory of its own).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use object_store::GetRange;

use crate::read_memory::into_bytes;
use crate::reused_read_memory::room_for;
use crate::ReadMemory;

/// What a direct read found.
pub(crate) enum LocalRead {
    Read(Bytes),
    /// No file at the key.
    Missing,
    /// Not a case for a direct read (no buffer, a range past the end, not a plain file):
    /// read through the object store, which also gives its errors.
    Declined,
}

/// The file of `key` under `root`: any name zarr-python writes (Unicode, spaces, `%`, `#`),
/// but no empty, `.` or `..` segment and no control character, so a key from untrusted
/// metadata cannot leave the store.
pub(crate) fn key_path(root: &Path, key: &str) -> Option<PathBuf> {
    let mut path = root.to_path_buf();
    for segment in key.split('/') {
        if segment.is_empty()
            || segment == "."
            || segment == ".."
            || segment.chars().any(char::is_control)
        {
            return None;
        }
        path.push(segment);
    }
    Some(path)
}

/// Reads `range` (all of it: `None`) of the file at `path` into a buffer from `memory`.
pub(crate) fn read_local(
    path: &Path,
    range: Option<&GetRange>,
    memory: &dyn ReadMemory,
) -> std::io::Result<LocalRead> {
    let (file, metadata) = match open_plain(path)? {
        Opened::Plain(file, metadata) => (file, metadata),
        Opened::Missing => return Ok(LocalRead::Missing),
        // What is not a plain file goes the object store's way, which names it in its error.
        Opened::NotPlain => return Ok(LocalRead::Declined),
    };
    let (start, len) = match range {
        None => (0, metadata.len()),
        Some(GetRange::Bounded(range))
            if range.start <= range.end && range.end <= metadata.len() =>
        {
            (range.start, range.end - range.start)
        }
        Some(_) => return Ok(LocalRead::Declined),
    };
    let Ok(len) = usize::try_from(len) else {
        return Ok(LocalRead::Declined);
    };
    let Some(mut buffer) = memory.buffer(len) else {
        return Ok(LocalRead::Declined);
    };
    read_exact_at(&file, AsMut::<[u8]>::as_mut(&mut *buffer), start)?;
    Ok(LocalRead::Read(into_bytes(buffer)))
}

/// Reads the whole file at `path` into `buffer`, grown to fit (with room to spare, zeroed only
/// where it grows); returns its length, `None` when there is no file. What is not a plain file
/// is an error here: its reader decodes the chunk and has no other way to read it.
pub(crate) fn read_whole_into(path: &Path, buffer: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let (file, metadata) = match open_plain(path)? {
        Opened::Plain(file, metadata) => (file, metadata),
        Opened::Missing => return Ok(None),
        Opened::NotPlain => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{} is not a plain file", path.display()),
            ))
        }
    };
    let len = usize::try_from(metadata.len())
        .map_err(|_| std::io::Error::other(format!("{} is larger than memory", path.display())))?;
    if buffer.len() < len {
        buffer.resize(room_for(len), 0);
    }
    read_exact_at(&file, &mut buffer[..len], 0)?;
    Ok(Some(len))
}

/// What a look at a chunk's file found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// A plain file, which the kernel was asked to start reading into the page cache.
    File,
    /// No file at the key.
    Missing,
    /// Something else (a directory, a FIFO), or an error: left to an ordinary read.
    Other,
}

/// Looks at the file at `path` and, where it is a plain file, asks the kernel to start
/// reading it into the page cache (a hint: its reader comes later).
pub(crate) fn probe_and_read_ahead(path: &Path) -> Probe {
    match open_plain(path) {
        Ok(Opened::Plain(file, _)) => {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                // SAFETY: the descriptor is open for the whole call; the advice reads no
                // memory.
                unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_WILLNEED) };
            }
            #[cfg(not(target_os = "linux"))]
            let _ = file;
            Probe::File
        }
        Ok(Opened::Missing) => Probe::Missing,
        Ok(Opened::NotPlain) | Err(_) => Probe::Other,
    }
}

/// What opening a chunk's file found.
enum Opened {
    /// A plain file, with its metadata.
    Plain(File, std::fs::Metadata),
    /// No file at the path.
    Missing,
    /// Something else: a directory, a FIFO.
    NotPlain,
}

/// Opens the file at `path` without waiting and looks at what it is.
fn open_plain(path: &Path) -> std::io::Result<Opened> {
    let file = match open_without_waiting(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Opened::Missing),
        Err(error) => return Err(error),
    };
    let metadata = file.metadata()?;
    Ok(match metadata.is_file() {
        true => Opened::Plain(file, metadata),
        false => Opened::NotPlain,
    })
}

/// A local read's error as object_store's local backend gives it.
pub(crate) fn local_error(source: std::io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalFileSystem",
        source: Box::new(source),
    }
}

/// Opens `path` for reading without waiting: opened plainly, a FIFO waits for a writer.
/// (A plain file's reads ignore the flag.)
fn open_without_waiting(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    options.open(path)
}

#[cfg(unix)]
fn read_exact_at(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buffer, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buffer: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buffer)
}
