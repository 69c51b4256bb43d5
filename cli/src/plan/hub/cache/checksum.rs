//! A download checked against the hub's checksum (its ETag, which names
//! the blob): git's blob SHA-1 for small files, SHA-256 for LFS files.

use std::io::Read;
use std::path::Path;

/// Checks a downloaded file against the ETag its blob is named by: git's
/// blob SHA-1 (40 hex digits) or the LFS file's SHA-256 (64); a file that
/// does not match is removed (blob and link), so the next run fetches it
/// again.
pub(super) fn verify(link: &Path) -> Result<(), String> {
    let blob = std::fs::canonicalize(link).map_err(|e| e.to_string())?;
    let etag = blob
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let digest = match etag.len() {
        40 if etag.bytes().all(|b| b.is_ascii_hexdigit()) => {
            use sha1::Digest;
            let len = std::fs::metadata(&blob).map_err(|e| e.to_string())?.len();
            let mut hasher = sha1::Sha1::new();
            hasher.update(format!("blob {len}\0").as_bytes());
            hash_file(&blob, |chunk| hasher.update(chunk))?;
            hex(&hasher.finalize())
        }
        64 if etag.bytes().all(|b| b.is_ascii_hexdigit()) => {
            use sha2::Digest;
            let mut hasher = sha2::Sha256::new();
            hash_file(&blob, |chunk| hasher.update(chunk))?;
            hex(&hasher.finalize())
        }
        // An ETag that is no checksum (another server's): nothing to check.
        _ => return Ok(()),
    };
    if digest == etag {
        return Ok(());
    }
    let _ = std::fs::remove_file(&blob);
    let _ = std::fs::remove_file(link);
    Err(format!(
        "the download does not match the hub's checksum {etag} (it hashes to {digest}); it was \
         removed, run again"
    ))
}

fn hash_file(path: &Path, mut update: impl FnMut(&[u8])) -> Result<(), String> {
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(());
        }
        update(&buffer[..n]);
    }
}
