//! A download checked against the hub's checksum (the digest its ETag
//! names the blob by): git's blob SHA-1 for small files, SHA-256 for LFS
//! files. Another digest (a mirror's MD5, say) is no checksum the tool
//! computes; such a file is checked by its size alone (`fetch.rs`).

use std::io::Read;
use std::path::Path;

/// Checks `file` against `etag`, the digest its blob is to be named by:
/// git's blob SHA-1 (40 hex digits) or the LFS file's SHA-256 (64);
/// `Ok` for a digest that is neither.
pub(super) fn verify(file: &Path, etag: &str) -> Result<(), String> {
    let etag = etag.to_ascii_lowercase();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let digest = match etag.len() {
        40 if etag.bytes().all(|b| b.is_ascii_hexdigit()) => {
            use sha1::Digest;
            let len = std::fs::metadata(file).map_err(|e| e.to_string())?.len();
            let mut hasher = sha1::Sha1::new();
            hasher.update(format!("blob {len}\0").as_bytes());
            hash_file(file, |chunk| hasher.update(chunk))?;
            hex(&hasher.finalize())
        }
        64 if etag.bytes().all(|b| b.is_ascii_hexdigit()) => {
            use sha2::Digest;
            let mut hasher = sha2::Sha256::new();
            hash_file(file, |chunk| hasher.update(chunk))?;
            hex(&hasher.finalize())
        }
        // No checksum this tool computes: the size was checked.
        _ => return Ok(()),
    };
    if digest == etag {
        return Ok(());
    }
    Err(format!(
        "the download does not match the hub's checksum {etag} (it hashes to {digest})"
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
