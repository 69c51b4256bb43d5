//! Credentials kept out of everything pipeline prints or writes: error
//! lines, warnings, logs, records, `--report` and `run.json`.
//!
//! A URL may carry a secret in two places: its user information
//! (`https://user:password@host/…`) and its query (a presigned URL's
//! signature, a token). [`redact_url`] is how a URL is *shown*: the user
//! information left out, each credential's value replaced by
//! [`REDACTED`], everything else byte for byte (so an expired URL's
//! `X-Amz-Date` and `X-Amz-Expires` still say when it was signed).
//! [`object_url`] is how a URL *names* its object, in outputs and in a
//! run's identity: the user information and every parameter of a
//! signature left out, so that the same object fetched through a URL
//! signed again tomorrow has the same name and a run resumes.
//! [`redact_text`] does the first to every URL in a line of text and masks
//! the values of the environment's secret variables (`HF_TOKEN`,
//! `AWS_SECRET_ACCESS_KEY`, …): the last guard before a line is printed.
//!
//! The parser is a careful scan of the text, not a URL library's parse and
//! serialisation: a URL without credentials must come out as the very same
//! bytes (a library normalises case, percent-encoding and empty paths), or
//! the names of every URL item would change.

use std::borrow::Cow;

/// What a credential's value is replaced by.
pub const REDACTED: &str = "REDACTED";

/// Query parameters whose value is a credential, compared without regard to
/// case (and after percent-decoding the name). A name is here when some
/// widely used scheme puts a secret, or what lets one act as its holder,
/// in it:
/// - AWS Signature V4 (S3 presigned URLs): `X-Amz-Signature`, the access
///   key and scope in `X-Amz-Credential`, a session's `X-Amz-Security-Token`;
///   Signature V2: `Signature` with `AWSAccessKeyId`;
/// - Google Cloud Storage signed URLs: `X-Goog-Signature`,
///   `X-Goog-Credential`, V2's `GoogleAccessId`;
/// - Azure shared access signatures: `sig`;
/// - CloudFront signed URLs: `Signature`, `Policy`, `Key-Pair-Id`;
/// - OAuth and API keys as query parameters (`access_token`, `token`,
///   `key`, `api_key`, …) and the odd `password` or `secret`.
///
/// A parameter of another name is shown: a false positive here costs a
/// name shown as `REDACTED`, a false negative a leaked secret, so the list
/// takes the common names of the schemes above rather than guessing from
/// the value.
pub const CREDENTIAL_PARAMETERS: &[&str] = &[
    "x-amz-signature",
    "x-amz-credential",
    "x-amz-security-token",
    "awsaccesskeyid",
    "signature",
    "x-goog-signature",
    "x-goog-credential",
    "x-goog-security-token",
    "googleaccessid",
    "sig",
    "policy",
    "key-pair-id",
    "token",
    "access_token",
    "id_token",
    "refresh_token",
    "auth",
    "authorization",
    "key",
    "api_key",
    "apikey",
    "api-key",
    "password",
    "passwd",
    "secret",
    "client_secret",
    // Alibaba Cloud OSS (V1 and V4, an STS token).
    "ossaccesskeyid",
    "security-token",
    "x-oss-signature",
    "x-oss-credential",
    "x-oss-security-token",
    // Tencent Cloud COS.
    "q-signature",
    "q-ak",
    "x-cos-security-token",
    // Huawei Cloud OBS.
    "accesskeyid",
    "x-obs-security-token",
    // Tokens under other spellings (GitLab's `private_token`, OpenStack's
    // `X-Auth-Token`).
    "access-token",
    "private_token",
    "x-auth-token",
];

/// Endings that make any parameter's name a credential's, whatever the
/// vendor's prefix (`x-acme-signature`, `sessionToken`, `db_password`),
/// compared without regard to case: a name no list has yet is still not
/// shown. The cost is a harmless parameter so named (`pageToken`) shown
/// as [`REDACTED`].
const CREDENTIAL_SUFFIXES: &[&str] = &[
    "signature",
    "security-token",
    "credential",
    "token",
    "secret",
    "password",
    "accesskeyid",
];

/// Query parameters that belong to a signature without being secret: when
/// and how it was signed, which changes each time a URL is signed again.
/// [`object_url`] leaves them out with the credentials of a signed URL, so
/// an object keeps its name (in a URL without credentials they are the
/// server's own parameters, and stay); [`redact_url`] shows them.
const SIGNING_PARAMETERS: &[&str] = &[
    "x-amz-algorithm",
    "x-amz-date",
    "x-amz-expires",
    "x-amz-signedheaders",
    "x-goog-algorithm",
    "x-goog-date",
    "x-goog-expires",
    "x-goog-signedheaders",
    "expires",
    // Azure: a signature's start and expiry times.
    "st",
    "se",
    // Alibaba OSS V4 and Tencent COS.
    "x-oss-signature-version",
    "x-oss-date",
    "x-oss-expires",
    "x-oss-additional-headers",
    "q-sign-algorithm",
    "q-sign-time",
    "q-key-time",
    "q-header-list",
    "q-url-param-list",
];

/// Environment variables whose values are secrets, masked by
/// [`redact_text`] wherever they appear.
pub const SECRET_VARIABLES: &[&str] = &[
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
];

/// A secret variable's value shorter than this is not masked in text: it
/// would mask ordinary words, and a real token is longer.
const SHORTEST_MASKED: usize = 8;

/// `url` as it may be shown: without `user:password@`, and with the value
/// of every query parameter in [`CREDENTIAL_PARAMETERS`] replaced by
/// [`REDACTED`]; any other text comes back unchanged, borrowed.
pub fn redact_url(url: &str) -> Cow<'_, str> {
    rewrite(url, |name| {
        if is_credential(name) {
            Param::Redact
        } else {
            Param::Keep
        }
    })
}

/// `url` as the name of its object: without `user:password@`, and without
/// the query parameters of a signature (credentials, and when and how it
/// was signed), so that two signings of one object name it alike. Other
/// parameters stay (they may choose a version or a rendition). Any other
/// text comes back unchanged, borrowed.
///
/// Only a signed URL (one with a signature parameter, [`is_signature`])
/// loses its credentials from its name: they are the signing's, and the
/// object is what the rest names. In a URL without a signature a
/// credential's parameter may be what chooses the object (`?key=a.jpg`),
/// so it stays in the name, its value shown as [`REDACTED`]; two objects
/// whose names then agree are refused by the manifest, not run as one.
pub fn object_url(url: &str) -> Cow<'_, str> {
    let signed = is_signed(url);
    rewrite(url, |name| {
        if signed && (is_credential(name) || matches_any(name, SIGNING_PARAMETERS)) {
            Param::Drop
        } else if is_credential(name) {
            Param::Redact
        } else {
            Param::Keep
        }
    })
}

/// What tells `url`'s object from another's, for comparing, never for
/// showing: [`object_url`] with an unsigned URL's credentials as they
/// are (they may choose the object). Two URLs of one object signed twice,
/// or with and without `user:password@`, are alike.
pub fn object_identity(url: &str) -> Cow<'_, str> {
    let signed = is_signed(url);
    rewrite(url, |name| {
        if signed && (is_credential(name) || matches_any(name, SIGNING_PARAMETERS)) {
            Param::Drop
        } else {
            Param::Keep
        }
    })
}

/// Whether `url`'s query holds a signature ([`is_signature`]).
fn is_signed(url: &str) -> bool {
    url.split_once('?').is_some_and(|(_, query)| {
        let query = query.split('#').next().unwrap_or_default();
        query.split('&').any(|pair| {
            let name = pair.split_once('=').map_or(pair, |(name, _)| name);
            is_signature(&percent_decoded(name))
        })
    })
}

/// Whether a query parameter is a signature, which makes its URL a
/// signed one: AWS's `X-Amz-Signature` and V2 `Signature`, Google's
/// `X-Goog-Signature`, CloudFront's `Signature`, Alibaba's
/// `X-Oss-Signature` and `Signature`, Tencent's `q-signature`, Huawei's
/// `Signature` (any name ending in `signature`), and Azure's `sig`. Tokens,
/// keys and credentials alone do not: an API's `?key=` or `?token=` may
/// stand beside what chooses the object, or be it.
fn is_signature(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    name == "sig" || name.ends_with("signature")
}

/// `text` with every URL in it shown as [`redact_url`] shows it, and the
/// value of each [`SECRET_VARIABLES`] variable set in the environment
/// replaced by [`REDACTED`].
pub fn redact_text(text: &str) -> Cow<'_, str> {
    let secrets: Vec<String> = SECRET_VARIABLES
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .collect();
    redact_text_with(text, &secrets)
}

/// `text`, a message about `url`, as [`redact_text`] shows it, and with
/// each secret `url` carries (its password, each credential's value, as
/// written and percent-decoded) replaced wherever else it appears: a
/// library's message may quote the URL in a form no scan of URLs knows
/// (debug-printed, split into parts).
pub fn redact_message(text: &str, url: &str) -> String {
    let mut secrets: Vec<String> = SECRET_VARIABLES
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .collect();
    let mut redacted = redact_text_with(text, &secrets).into_owned();
    secrets.clear();
    let mut found = |value: &str| {
        for form in [Cow::Borrowed(value), percent_decoded(value)] {
            if form.len() >= SHORTEST_MASKED_IN_URL {
                secrets.push(form.into_owned());
            }
        }
    };
    if let Some((authority_start, host_start, _)) = authority(url)
        && host_start > authority_start
    {
        let userinfo = &url[authority_start..host_start - 1];
        if let Some((_, password)) = userinfo.split_once(':') {
            found(password);
        }
    }
    if let Some((_, query)) = url.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=')
                && is_credential(&percent_decoded(name))
            {
                found(value);
            }
        }
    }
    // Longest first: one secret may hold another.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in &secrets {
        if redacted.contains(secret.as_str()) {
            redacted = redacted.replace(secret.as_str(), REDACTED);
        }
    }
    redacted
}

/// A secret of a URL shorter than this is not masked elsewhere in a
/// message (`X-Amz-Signature=0` must not mask every `0`); its place in
/// the URL is redacted all the same.
const SHORTEST_MASKED_IN_URL: usize = 4;

/// Where `url`'s authority starts, where its host starts (after any user
/// information) and where the authority ends; `None` for text that is no
/// `scheme://` URL.
fn authority(url: &str) -> Option<(usize, usize, usize)> {
    let sep = url.find("://")?;
    if sep == 0 || !url[..sep].bytes().all(is_scheme_byte) {
        return None;
    }
    let start = sep + 3;
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    // The user information runs to the authority's last `@`.
    let host = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    Some((start, host, end))
}

/// [`redact_text`] with the secrets given.
fn redact_text_with<'a>(text: &'a str, secrets: &[String]) -> Cow<'a, str> {
    let mut out = redact_urls_in(text);
    for secret in secrets {
        let secret = secret.trim();
        if secret.len() >= SHORTEST_MASKED && out.contains(secret) {
            out = Cow::Owned(out.replace(secret, REDACTED));
        }
    }
    out
}

/// Every `scheme://…` in `text` through [`redact_url`]. A URL runs to the
/// next blank, quote or angle bracket; punctuation that ends a sentence
/// (`https://h/x?sig=S: not found`) is left outside it.
fn redact_urls_in(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let sep = from + found;
        // The scheme: letters, digits, `+`, `-`, `.`, starting with a letter.
        let mut start = sep;
        while start > 0 && is_scheme_byte(bytes[start - 1]) {
            start -= 1;
        }
        while start < sep && !bytes[start].is_ascii_alphabetic() {
            start += 1;
        }
        let mut end = sep + 3;
        while end < bytes.len() && !ends_url(bytes[end]) {
            end += 1;
        }
        // URLs joined by commas: each is its own.
        if let Some(next) = text[sep + 3..end].find("://") {
            let mut at = sep + 3 + next;
            while at > sep + 3 && is_scheme_byte(bytes[at - 1]) {
                at -= 1;
            }
            if bytes[at - 1] == b',' {
                end = at - 1;
            }
        }
        if start == sep || start < copied {
            from = sep + 3;
            continue;
        }
        while end > sep + 3 && matches!(bytes[end - 1], b'.' | b',' | b':' | b';' | b')' | b']') {
            end -= 1;
        }
        let url = &text[start..end];
        if let Cow::Owned(redacted) = redact_url(url) {
            // A URL nested in this one was redacted with it.
            out.push_str(&text[copied..start]);
            out.push_str(&redacted);
            copied = end;
            from = end.max(sep + 3);
        } else {
            // Each `://` on its own: one inside an unchanged URL is looked at.
            from = sep + 3;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

fn is_scheme_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')
}

/// A byte no URL in a message holds unescaped.
fn ends_url(b: u8) -> bool {
    b.is_ascii_whitespace()
        || b.is_ascii_control()
        || matches!(b, b'"' | b'\'' | b'<' | b'>' | b'`')
}

/// What becomes of one query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Param {
    Keep,
    Redact,
    Drop,
}

/// `url` without its user information and with each query parameter as
/// `choose` says; borrowed when nothing changes (and for text that is no
/// `scheme://` URL).
fn rewrite(url: &str, choose: impl Fn(&str) -> Param) -> Cow<'_, str> {
    // Fast path: neither user information nor a query.
    if !url.contains('@') && !url.contains('?') {
        return Cow::Borrowed(url);
    }
    let Some((authority_start, host_start, authority_end)) = authority(url) else {
        return Cow::Borrowed(url);
    };
    let (before_query, query, fragment) = {
        let rest = &url[authority_end..];
        let fragment_at = rest.find('#').map_or(url.len(), |i| authority_end + i);
        match url[authority_end..fragment_at].find('?') {
            Some(q) => (
                authority_end + q,
                Some(&url[authority_end + q + 1..fragment_at]),
                &url[fragment_at..],
            ),
            None => (fragment_at, None, &url[fragment_at..]),
        }
    };
    let mut changed = host_start != authority_start;
    let mut kept: Vec<Cow<'_, str>> = Vec::new();
    if let Some(query) = query {
        for pair in query.split('&') {
            let name = pair.split_once('=').map_or(pair, |(name, _)| name);
            match choose(&percent_decoded(name)) {
                Param::Keep => match pair.split_once('=').map(|(_, value)| nested(value)) {
                    Some(Cow::Owned(value)) => {
                        changed = true;
                        kept.push(Cow::Owned(format!("{name}={value}")));
                    }
                    _ => kept.push(Cow::Borrowed(pair)),
                },
                Param::Redact => {
                    changed = true;
                    kept.push(Cow::Owned(format!("{name}={REDACTED}")));
                }
                Param::Drop => changed = true,
            }
        }
    }
    if !changed {
        return Cow::Borrowed(url);
    }
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..authority_start]);
    out.push_str(&url[host_start..before_query]);
    if query.is_some() && !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    out.push_str(fragment);
    Cow::Owned(out)
}

/// A query value with the URLs in it (`?next=https://b/x?sig=S`, or
/// percent-encoded) redacted; borrowed when it holds none to redact. An
/// encoded one comes back encoded (every byte but unreserved ones).
fn nested(value: &str) -> Cow<'_, str> {
    if value.contains("://") {
        return redact_urls_in(value);
    }
    if !value.to_ascii_lowercase().contains("%3a%2f%2f") {
        return Cow::Borrowed(value);
    }
    let decoded = percent_decoded(value);
    match redact_urls_in(&decoded) {
        Cow::Borrowed(_) => Cow::Borrowed(value),
        Cow::Owned(redacted) => Cow::Owned(
            redacted
                .bytes()
                .map(|b| {
                    if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                        char::from(b).to_string()
                    } else {
                        format!("%{b:02X}")
                    }
                })
                .collect(),
        ),
    }
}

fn is_credential(name: &str) -> bool {
    let lower = name.trim().to_ascii_lowercase();
    matches_any(&lower, CREDENTIAL_PARAMETERS)
        || CREDENTIAL_SUFFIXES.iter().any(|end| lower.ends_with(end))
}

fn matches_any(name: &str, list: &[&str]) -> bool {
    let name = name.trim();
    list.iter().any(|known| known.eq_ignore_ascii_case(name))
}

/// A parameter's name with its `%XX` escapes (and `+`) decoded, so that
/// `X%2DAmz%2DSignature` is known; lossy where the bytes are not UTF-8.
fn percent_decoded(name: &str) -> Cow<'_, str> {
    if !name.contains(['%', '+']) {
        return Cow::Borrowed(name);
    }
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests;
