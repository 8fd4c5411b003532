//! Reading an S3 answer on the direct data path: its declared length, the CRC32C header we
//! send, a capped error body, the `<Code>`/`<Message>` of an error, and the server's clock
//! offset. Invariants: an error body is read no further than its cap and one frame (a hostile
//! or broken server cannot make us buffer more), and nothing here fails: a header or body we cannot read is
//! `None`.

use std::time::SystemTime;

use base64::Engine as _;
use http_body_util::BodyExt;

/// The `Content-Length` a response declares, if it is a number.
pub(super) fn content_length<B>(resp: &http::Response<B>) -> Option<u64> {
    resp.headers()
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The base64 of the big-endian CRC32C, as `x-amz-checksum-crc32c` carries it.
pub(super) fn crc32c_header(data: &[u8]) -> String {
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// Up to about `cap` bytes of a body (all of a short error body, which lets hyper reuse the
/// connection); a transport error ends it early.
pub(super) async fn read_capped(mut body: hyper::body::Incoming, cap: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < cap {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(d) = frame.into_data() {
                    out.extend_from_slice(&d);
                }
            }
            _ => break,
        }
    }
    out
}

/// The S3 `<Code>` and `<Message>` of an error body (`<Error><Code>…</Code><Message>…`), read
/// with aws-smithy-xml, the SDK's own XML decoder (already in the tree through aws-sdk-s3), so
/// entities (`&amp;`) are decoded and a tag in a comment or CDATA is not taken for the field. A
/// body cut at [`ERROR_BODY_MAX`](super::ERROR_BODY_MAX) or malformed past a field still gives the fields before it.
pub(super) fn error_code(body: &[u8]) -> (Option<String>, Option<String>) {
    use aws_smithy_xml::decode::{try_data, Document};
    let (mut code, mut message) = (None, None);
    let text = String::from_utf8_lossy(body);
    let mut doc = Document::new(&text);
    let Ok(mut root) = doc.root_element() else {
        return (code, message);
    };
    while let Some(mut tag) = root.next_tag() {
        let slot = match tag.start_el().local() {
            "Code" => &mut code,
            "Message" => &mut message,
            _ => continue,
        };
        if let Ok(v) = try_data(&mut tag) {
            slot.get_or_insert_with(|| v.into_owned());
        }
        if code.is_some() && message.is_some() {
            break;
        }
    }
    (code, message)
}

/// The server's clock minus ours, in milliseconds, from a response's `Date` header.
pub(super) fn server_clock_offset<B>(resp: &http::Response<B>) -> Option<i64> {
    let date = resp.headers().get(http::header::DATE)?.to_str().ok()?;
    let server = httpdate::parse_http_date(date).ok()?;
    let now = SystemTime::now();
    Some(match server.duration_since(now) {
        Ok(ahead) => ahead.as_millis() as i64,
        Err(behind) => -(behind.duration().as_millis() as i64),
    })
}
