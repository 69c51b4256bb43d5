use super::*;

/// (URL, as shown, as the object's name)
const FORMS: &[(&str, &str, &str)] = &[
    // Nothing to hide: the very same text, whatever its case or escapes.
    (
        "s3://bucket/a/b.jpg",
        "s3://bucket/a/b.jpg",
        "s3://bucket/a/b.jpg",
    ),
    (
        "HTTP://Host:8080/a%7e/b.jpg",
        "HTTP://Host:8080/a%7e/b.jpg",
        "HTTP://Host:8080/a%7e/b.jpg",
    ),
    ("https://h", "https://h", "https://h"),
    (
        "https://h/img?width=256&v=2#top",
        "https://h/img?width=256&v=2#top",
        "https://h/img?width=256&v=2#top",
    ),
    // A signature's times without a signature are the server's own.
    (
        "https://h/live.jpg?expires=5&st=1",
        "https://h/live.jpg?expires=5&st=1",
        "https://h/live.jpg?expires=5&st=1",
    ),
    // An `@` in the path or query is no user information.
    (
        "https://h/a@2x.png",
        "https://h/a@2x.png",
        "https://h/a@2x.png",
    ),
    (
        "https://h/a?by=me@x",
        "https://h/a?by=me@x",
        "https://h/a?by=me@x",
    ),
    (
        "not a url ?token=x",
        "not a url ?token=x",
        "not a url ?token=x",
    ),
    (
        "/local/file@x?.jpg",
        "/local/file@x?.jpg",
        "/local/file@x?.jpg",
    ),
    // User information.
    (
        "http://user:pass@127.0.0.1:9000/m.onnx",
        "http://127.0.0.1:9000/m.onnx",
        "http://127.0.0.1:9000/m.onnx",
    ),
    ("https://user@h/x", "https://h/x", "https://h/x"),
    ("https://u:p@ss@h?x=1", "https://h?x=1", "https://h?x=1"),
    // AWS Signature V4, as S3 presigns.
    (
        "https://b.s3.amazonaws.com/k.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256\
         &X-Amz-Credential=AKIAEXAMPLE%2F20261128%2Fus-east-1%2Fs3%2Faws4_request\
         &X-Amz-Date=20261128T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host\
         &X-Amz-Security-Token=FwoGZX&X-Amz-Signature=abc123",
        "https://b.s3.amazonaws.com/k.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256\
         &X-Amz-Credential=REDACTED&X-Amz-Date=20261128T000000Z&X-Amz-Expires=3600\
         &X-Amz-SignedHeaders=host&X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED",
        "https://b.s3.amazonaws.com/k.jpg",
    ),
    // Any case, and a name written with escapes.
    (
        "https://h/k?x-amz-signature=s&X%2DAmz%2DCredential=c&versionId=7",
        "https://h/k?x-amz-signature=REDACTED&X%2DAmz%2DCredential=REDACTED&versionId=7",
        "https://h/k?versionId=7",
    ),
    // Signature V2.
    (
        "https://b.s3.amazonaws.com/k?AWSAccessKeyId=AKIA&Expires=1700000000&Signature=s%2B",
        "https://b.s3.amazonaws.com/k?AWSAccessKeyId=REDACTED&Expires=1700000000\
         &Signature=REDACTED",
        "https://b.s3.amazonaws.com/k",
    ),
    // Google Cloud Storage.
    (
        "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256\
         &X-Goog-Credential=sa%40p.iam&X-Goog-Date=20261128T000000Z&X-Goog-Expires=900\
         &X-Goog-SignedHeaders=host&X-Goog-Signature=dead",
        "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256\
         &X-Goog-Credential=REDACTED&X-Goog-Date=20261128T000000Z&X-Goog-Expires=900\
         &X-Goog-SignedHeaders=host&X-Goog-Signature=REDACTED",
        "https://storage.googleapis.com/b/o",
    ),
    // Azure SAS.
    (
        "https://a.blob.core.windows.net/c/b.jpg?sv=2022-11-02&sp=r&st=2026-11-28T00:00Z\
         &se=2026-11-29T00:00Z&sr=b&sig=abc%3D",
        "https://a.blob.core.windows.net/c/b.jpg?sv=2022-11-02&sp=r&st=2026-11-28T00:00Z\
         &se=2026-11-29T00:00Z&sr=b&sig=REDACTED",
        "https://a.blob.core.windows.net/c/b.jpg?sv=2022-11-02&sp=r&sr=b",
    ),
    // CloudFront.
    (
        "https://d.cloudfront.net/x.jpg?Expires=1&Signature=s~&Key-Pair-Id=K2&Policy=eyJ",
        "https://d.cloudfront.net/x.jpg?Expires=1&Signature=REDACTED&Key-Pair-Id=REDACTED\
         &Policy=REDACTED",
        "https://d.cloudfront.net/x.jpg",
    ),
    // Tokens and keys; a name without a value; a fragment kept.
    (
        "https://api.h/v1/img?access_token=t&key=k&token&size=3#f",
        "https://api.h/v1/img?access_token=REDACTED&key=REDACTED&token=REDACTED&size=3#f",
        // Unsigned: the credentials may choose the object, so they stay in
        // its name, their values hidden.
        "https://api.h/v1/img?access_token=REDACTED&key=REDACTED&token=REDACTED&size=3#f",
    ),
    (
        "https://api/get?key=a.jpg",
        "https://api/get?key=REDACTED",
        "https://api/get?key=REDACTED",
    ),
    // A token beside a signature is the signing's.
    (
        "https://api/get?key=a.jpg&Signature=s",
        "https://api/get?key=REDACTED&Signature=REDACTED",
        "https://api/get",
    ),
    // Alibaba OSS: V1, and V4 with an STS token.
    (
        "https://b.oss-cn-hangzhou.aliyuncs.com/k.jpg?OSSAccessKeyId=LTAI&Expires=1\
         &Signature=s%3D&security-token=CAIS",
        "https://b.oss-cn-hangzhou.aliyuncs.com/k.jpg?OSSAccessKeyId=REDACTED&Expires=1\
         &Signature=REDACTED&security-token=REDACTED",
        "https://b.oss-cn-hangzhou.aliyuncs.com/k.jpg",
    ),
    (
        "https://b.oss-cn-hangzhou.aliyuncs.com/k.jpg?x-oss-signature-version=OSS4-HMAC-SHA256\
         &x-oss-credential=LTAI%2F20261128%2Fcn-hangzhou%2Foss%2Faliyun_v4_request\
         &x-oss-date=20261128T000000Z&x-oss-expires=3600&x-oss-security-token=CAIS\
         &x-oss-signature=ab",
        "https://b.oss-cn-hangzhou.aliyuncs.com/k.jpg?x-oss-signature-version=OSS4-HMAC-SHA256\
         &x-oss-credential=REDACTED&x-oss-date=20261128T000000Z&x-oss-expires=3600\
         &x-oss-security-token=REDACTED&x-oss-signature=REDACTED",
        "https://b.oss-cn-hangzhou.aliyuncs.com/k.jpg",
    ),
    // Tencent COS.
    (
        "https://b-125.cos.ap-guangzhou.myqcloud.com/k.jpg?q-sign-algorithm=sha1&q-ak=AKID\
         &q-sign-time=1;2&q-key-time=1;2&q-header-list=host&q-url-param-list=\
         &q-signature=ab&x-cos-security-token=tok",
        "https://b-125.cos.ap-guangzhou.myqcloud.com/k.jpg?q-sign-algorithm=sha1\
         &q-ak=REDACTED&q-sign-time=1;2&q-key-time=1;2&q-header-list=host\
         &q-url-param-list=&q-signature=REDACTED&x-cos-security-token=REDACTED",
        "https://b-125.cos.ap-guangzhou.myqcloud.com/k.jpg",
    ),
    // Huawei OBS.
    (
        "https://b.obs.cn-north-4.myhuaweicloud.com/k.jpg?AccessKeyId=AK&Expires=1\
         &Signature=s&x-obs-security-token=t",
        "https://b.obs.cn-north-4.myhuaweicloud.com/k.jpg?AccessKeyId=REDACTED&Expires=1\
         &Signature=REDACTED&x-obs-security-token=REDACTED",
        "https://b.obs.cn-north-4.myhuaweicloud.com/k.jpg",
    ),
    // Tokens under other names, and any name with a credential's ending.
    (
        "https://git.h/raw?private_token=p&access-token=a&X-Auth-Token=x&ref=main",
        "https://git.h/raw?private_token=REDACTED&access-token=REDACTED\
         &X-Auth-Token=REDACTED&ref=main",
        "https://git.h/raw?private_token=REDACTED&access-token=REDACTED\
         &X-Auth-Token=REDACTED&ref=main",
    ),
    (
        "https://h/x?x-acme-signature=1&sessionToken=2&DB_Password=3&clientSecret=4\
         &myCredential=5&Vendor-Security-Token=6&SubAccessKeyId=7&width=8",
        "https://h/x?x-acme-signature=REDACTED&sessionToken=REDACTED&DB_Password=REDACTED\
         &clientSecret=REDACTED&myCredential=REDACTED&Vendor-Security-Token=REDACTED\
         &SubAccessKeyId=REDACTED&width=8",
        "https://h/x?width=8",
    ),
    // Both at once.
    (
        "http://u:p@h:1/x?sig=s",
        "http://h:1/x?sig=REDACTED",
        "http://h:1/x",
    ),
];

#[test]
fn urls_nested_in_a_query_or_joined_by_commas_are_redacted_each() {
    // (text, as shown)
    let table = [
        (
            "https://a/login?next=https://b/x?X-Amz-Signature=S1",
            "https://a/login?next=https://b/x?X-Amz-Signature=REDACTED",
        ),
        (
            "see https://a/r?u=https%3A%2F%2Fb%2Fx%3Fsig%3DS2 now",
            "see https://a/r?u=https%3A%2F%2Fb%2Fx%3Fsig%3DREDACTED now",
        ),
        (
            "https://a/x?sig=S3,https://b/y?token=S4",
            "https://a/x?sig=REDACTED,https://b/y?token=REDACTED",
        ),
        (
            "https://u:S5@a/x,https://v:S6@b/y",
            "https://a/x,https://b/y",
        ),
        (
            "https://a/x?v=1,http://b/y?key=S7&w=2",
            "https://a/x?v=1,http://b/y?key=REDACTED&w=2",
        ),
        // Nothing to hide: the very same text.
        (
            "https://a/r?u=https%3A%2F%2Fb%2Fx",
            "https://a/r?u=https%3A%2F%2Fb%2Fx",
        ),
        ("https://a/x,https://b/y", "https://a/x,https://b/y"),
    ];
    for (text, shown) in table {
        assert_eq!(redact_text_with(text, &[]), shown, "{text}");
        assert_eq!(redact_text_with(shown, &[]), shown, "again: {text}");
    }
}

#[test]
fn every_form_is_shown_and_named_without_its_credentials() {
    for (url, shown, named) in FORMS {
        assert_eq!(redact_url(url), *shown, "shown: {url}");
        assert_eq!(object_url(url), *named, "named: {url}");
        // Redacting again changes nothing.
        assert_eq!(redact_url(shown), *shown, "again: {url}");
        assert_eq!(object_url(named), *named, "again: {url}");
    }
}

#[test]
fn a_url_without_credentials_is_borrowed_unchanged() {
    for url in [
        "s3://b/k",
        "https://h/a?width=1",
        "https://h/a@b",
        "plain text",
    ] {
        assert!(matches!(redact_url(url), Cow::Borrowed(_)), "{url}");
        assert!(matches!(object_url(url), Cow::Borrowed(_)), "{url}");
        assert!(matches!(redact_text(url), Cow::Borrowed(_)), "{url}");
    }
}

#[test]
fn two_signings_of_one_object_name_it_alike() {
    let signed = |date: &str, signature: &str| {
        format!(
            "https://b.s3.amazonaws.com/k.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256\
             &X-Amz-Credential=AKIA%2F{date}&X-Amz-Date={date}T000000Z&X-Amz-Expires=60\
             &X-Amz-SignedHeaders=host&X-Amz-Signature={signature}"
        )
    };
    let monday = signed("20261123", "aaaa");
    let tuesday = signed("20261124", "bbbb");
    assert_eq!(object_url(&monday), object_url(&tuesday));
    assert_eq!(object_url(&monday), "https://b.s3.amazonaws.com/k.jpg");
}

#[test]
fn every_url_in_a_line_is_redacted_and_the_rest_kept() {
    let line = "--model http://u:SECRET1@127.0.0.1:80/m.onnx?X-Amz-Signature=SECRET2: \
                404 Not Found (GET \"https://h/x?sig=SECRET3&a=1\", see <https://h/y?token=SECRET4>)";
    let shown = redact_text_with(line, &[]);
    for secret in ["SECRET1", "SECRET2", "SECRET3", "SECRET4", "u:"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert_eq!(
        shown,
        "--model http://127.0.0.1:80/m.onnx?X-Amz-Signature=REDACTED: \
         404 Not Found (GET \"https://h/x?sig=REDACTED&a=1\", see <https://h/y?token=REDACTED>)"
    );
}

#[test]
fn the_environments_secrets_are_masked_and_short_values_are_not() {
    let secrets = ["hf_abcdefghijklmnop".to_owned(), "short".to_owned()];
    let line = "token hf_abcdefghijklmnop refused; a short word stays";
    assert_eq!(
        redact_text_with(line, &secrets),
        "token REDACTED refused; a short word stays"
    );
}

#[test]
fn a_message_quoting_a_url_in_pieces_loses_its_secrets_too() {
    let url = "http://user:hunter22@h:1/x?X-Amz-Signature=abc%2Bdef123&sig=0&size=12345";
    let message = format!(
        "{url}: Reqwest {{ url: Url {{ username: \"user\", password: Some(\"hunter22\"), \
         query: Some(\"X-Amz-Signature=abc%2Bdef123\") }}, decoded: abc+def123 }}"
    );
    let shown = redact_message(&message, url);
    for secret in ["hunter22", "abc%2Bdef123", "abc+def123"] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(
        shown.starts_with("http://h:1/x?X-Amz-Signature=REDACTED&sig=REDACTED&size=12345: "),
        "{shown}"
    );
    // A value too short to mask elsewhere masks nothing else.
    assert!(shown.contains("size=12345"), "{shown}");
}
