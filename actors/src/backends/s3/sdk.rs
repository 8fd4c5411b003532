//! The aws-sdk-s3 data plane, and the requests only the SDK makes (listing, `DeleteObjects`, the
//! checksum-verifying reads of `kvtier scrub`).
//!
//! [`Sdk`] holds the SDK client and its settings; it is immutable once built and shared by
//! request futures through an `Arc`. The SDK client keeps its own identity cache; when the
//! store refuses credentials, [`Sdk::sdk_send`] fetches them again and retries once with a
//! config override (the identity cache cannot be told to drop what it holds).

use std::future::Future;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, Delete, ObjectIdentifier};
use bytes::Bytes;

use super::client::{current_credentials, send_put, with_config};
use super::credentials::REFRESH_DEADLINE;
use super::direct;
use crate::key::{NameFormat, ObjectKey};
use crate::storage::{status_kind, BackendError, ErrorKind, Fetched, Removed, Verdict};

/// The SDK client and the settings its requests follow.
pub(super) struct Sdk {
    pub(super) client: aws_sdk_s3::Client,
    /// The SDK client's credential source (asked again when the store refuses credentials).
    pub(super) credentials: SharedCredentialsProvider,
    pub(super) bucket: String,
    /// PUTs hash and sign their payload.
    pub(super) sign_payload: bool,
    /// PUTs send their body's CRC32C for the store to check.
    pub(super) put_crc32c: bool,
    /// GETs ask for the object's CRC32C and check it.
    pub(super) get_crc32c: bool,
}

impl Sdk {
    /// Sends an SDK request built by `send` (given a config override, or none); when the
    /// store refuses its credentials (`ExpiredToken`, `InvalidAccessKeyId`, …), once more with
    /// credentials fetched again from their source, through a config override: the SDK's
    /// identity cache cannot be told to drop the ones it holds.
    pub(super) async fn sdk_send<T, E, F, Fut>(
        &self,
        send: F,
    ) -> Result<T, SdkError<E, HttpResponse>>
    where
        F: Fn(Option<aws_sdk_s3::config::Builder>) -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata,
    {
        let first = send(None).await;
        let refused = matches!(&first, Err(e)
            if e.code().is_some_and(|c| direct::CREDENTIAL_CODES.contains(&c)));
        if !refused {
            return first;
        }
        match tokio::time::timeout(REFRESH_DEADLINE, current_credentials(&self.credentials)).await {
            Ok(Ok(creds)) => {
                tracing::info!("s3: credentials refused; retrying with fresh ones");
                let fresh = aws_sdk_s3::config::Builder::new().credentials_provider(creds);
                send(Some(fresh)).await
            }
            _ => first,
        }
    }

    /// A PUT.
    pub(super) async fn put(&self, object: &str, data: Bytes) -> Result<(), BackendError> {
        let len = data.len() as i64;
        let res = self
            .sdk_send(|config| {
                let mut req = self
                    .client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(object)
                    .content_type("application/octet-stream")
                    .content_length(len)
                    .body(ByteStream::from(data.clone()));
                if self.put_crc32c {
                    req = req.checksum_algorithm(ChecksumAlgorithm::Crc32C);
                }
                send_put(req, self.sign_payload, config)
            })
            .await;
        res.map(|_| ())
            .map_err(|e| classify("put", &self.bucket, e))
    }

    /// A HEAD: the size of a present, non-empty object.
    pub(super) async fn head(&self, object: &str) -> Result<Option<u64>, BackendError> {
        let res = self
            .sdk_send(|config| {
                let req = self.client.head_object().bucket(&self.bucket).key(object);
                with_config(req.customize(), config).send()
            })
            .await;
        match res {
            Ok(r) => Ok(r.content_length().filter(|l| *l > 0).map(|l| l as u64)),
            Err(e)
                if e.as_service_error().is_some_and(|s| s.is_not_found())
                    || e.raw_response().is_some_and(|r| r.status().as_u16() == 404) =>
            {
                Ok(None)
            }
            Err(e) => Err(classify("head", &self.bucket, e)),
        }
    }

    /// A `GetObject` (asking for the stored checksums with `checksum`): `None` when the key is
    /// missing (a miss); a missing bucket, also a 404, is an error.
    async fn get_object(
        &self,
        op: &'static str,
        object: &str,
        checksum: bool,
    ) -> Result<Option<GetObjectOutput>, BackendError> {
        let resp = self
            .sdk_send(|config| {
                let mut req = self.client.get_object().bucket(&self.bucket).key(object);
                if checksum {
                    req = req.checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled);
                }
                with_config(req.customize(), config).send()
            })
            .await;
        match resp {
            Ok(r) => Ok(Some(r)),
            Err(e) => {
                let not_found = e.code() != Some("NoSuchBucket")
                    && (e.as_service_error().is_some_and(|s| s.is_no_such_key())
                        || e.raw_response().is_some_and(|r| r.status().as_u16() == 404));
                if not_found {
                    Ok(None)
                } else {
                    Err(classify(op, &self.bucket, e))
                }
            }
        }
    }

    /// A GET, its body frames copied straight into `buf`.
    pub(super) async fn get(&self, object: &str, buf: &mut [u8]) -> Result<Fetched, BackendError> {
        let Some(resp) = self.get_object("get", object, self.get_crc32c).await? else {
            return Ok(Fetched::Absent);
        };
        let declared = resp.content_length().unwrap_or(-1);
        if declared != buf.len() as i64 {
            return Ok(Fetched::SizeMismatch {
                actual: declared.max(0) as u64,
            });
        }
        let mut body = resp.body;
        let mut off = 0usize;
        loop {
            match body.try_next().await {
                Ok(Some(chunk)) => {
                    let end = off + chunk.len();
                    if end > buf.len() {
                        // The server sent more than it declared: a miss, never a partial copy.
                        return Ok(Fetched::SizeMismatch { actual: end as u64 });
                    }
                    buf[off..end].copy_from_slice(&chunk);
                    off = end;
                }
                Ok(None) => break,
                Err(e) => return Err(BackendError::connection("get", e.to_string()).with_source(e)),
            }
        }
        if off != buf.len() {
            return Ok(Fetched::SizeMismatch { actual: off as u64 });
        }
        Ok(Fetched::Hit)
    }

    /// Reads an object whole and checks it against the CRC32C the store kept with it (`kvtier
    /// scrub`): the GET asks for stored checksums (`x-amz-checksum-mode: ENABLED`). An object
    /// stored without one (`s3_checksum = "none"`, LMCache's own adapters) is unverifiable; a
    /// body whose CRC32C differs, or that the SDK's own validation refuses, is corrupt.
    pub(super) async fn verify(&self, object: &str) -> Result<Verdict, BackendError> {
        let Some(resp) = self.get_object("verify", object, true).await? else {
            return Ok(Verdict::Absent);
        };
        let stored = resp.checksum_crc32_c().map(str::to_owned);
        let body = match resp.body.collect().await {
            Ok(b) => b.into_bytes(),
            Err(e) => {
                // The SDK validates a stored checksum as the body streams; its mismatch error is
                // a corrupt object, any other body error a failed read.
                let mut chain: Option<&(dyn std::error::Error + 'static)> = Some(&e);
                while let Some(err) = chain {
                    let text = err.to_string().to_ascii_lowercase();
                    if text.contains("checksum") && text.contains("mismatch") {
                        return Ok(Verdict::Corrupt(format!("S3 checksum check failed: {err}")));
                    }
                    chain = err.source();
                }
                return Err(BackendError::connection("verify", e.to_string()).with_source(e));
            }
        };
        let Some(stored) = stored else {
            return Ok(Verdict::Unverifiable);
        };
        let actual = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .encode(crate::backends::fs::crc32c(&body).to_be_bytes())
        };
        Ok(if actual == stored {
            Verdict::Intact
        } else {
            Verdict::Corrupt(format!(
                "CRC32C of the {} bytes read is {actual}, the store kept {stored}",
                body.len()
            ))
        })
    }

    /// `HeadBucket`: 404 is a missing bucket, 403 an existing one we may not list.
    pub(super) async fn bucket_exists(&self) -> Result<bool, BackendError> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(true),
            Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
                Some(404) => Ok(false),
                Some(403) => Ok(true),
                _ => Err(classify("head bucket", &self.bucket, e)),
            },
        }
    }

    /// The health check's GET: `NoSuchKey` and `AccessDenied` are answers from a store that
    /// serves (see `S3Storage::probe`).
    pub(super) async fn probe(&self, object: &str) -> Result<(), BackendError> {
        let sent = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.code(), Some("NoSuchKey" | "AccessDenied")) => Ok(()),
            Err(e) => Err(classify("health check", &self.bucket, e)),
        }
    }

    /// One `DeleteObjects` (quiet) of `names`: a result per name.
    pub(super) async fn delete_batch(
        &self,
        names: &[String],
    ) -> Result<Vec<Result<Removed, BackendError>>, BackendError> {
        let ids: Result<Vec<ObjectIdentifier>, _> = names
            .iter()
            .map(|n| ObjectIdentifier::builder().key(n).build())
            .collect();
        let delete = ids
            .and_then(|ids| Delete::builder().set_objects(Some(ids)).quiet(true).build())
            .map_err(|e| BackendError::io("delete", e))?;
        let out = self
            .client
            .delete_objects()
            .bucket(&self.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| classify("delete", &self.bucket, e))?;
        // Quiet mode lists only the failures.
        let failed: std::collections::HashMap<&str, String> = out
            .errors()
            .iter()
            .filter_map(|e| Some((e.key()?, e.message().unwrap_or("delete failed").to_owned())))
            .collect();
        Ok(names
            .iter()
            .map(|n| match failed.get(n.as_str()) {
                Some(m) => Err(BackendError::io("delete", m)),
                None => Ok(Removed::Unknown),
            })
            .collect())
    }
}

/// An SDK error as a [`BackendError`]: `NoSuchBucket` is [`ErrorKind::BucketMissing`], the
/// rest by transport failure or status.
pub(super) fn classify<E>(
    op: &'static str,
    bucket: &str,
    e: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> BackendError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let message = DisplayErrorContext(&e).to_string();
    if e.code() == Some("NoSuchBucket") {
        return direct::no_such_bucket(op, bucket, "NoSuchBucket").with_source(e);
    }
    let kind = match &e {
        SdkError::DispatchFailure(_) => ErrorKind::Connection,
        SdkError::TimeoutError(_) => ErrorKind::Timeout,
        SdkError::ServiceError(_) | SdkError::ResponseError(_) => e
            .raw_response()
            .map_or(ErrorKind::Other, |r| status_kind(r.status().as_u16())),
        _ => ErrorKind::Other,
    };
    BackendError::new(kind, op, message).with_source(e)
}

/// One page of a listing under `key_prefix` (names without it), through `ListObjectsV2`.
pub(super) async fn list_page(
    sdk: &Sdk,
    key_prefix: &str,
    format: NameFormat,
    model: Option<&str>,
    cursor: Option<&str>,
    limit: usize,
) -> Result<(Vec<(String, ObjectKey, u64, u64)>, Option<String>), BackendError> {
    let mut prefix = key_prefix.to_owned();
    if let Some(m) = model {
        prefix.push_str(m);
        prefix.push('@');
    }
    let mut req = sdk
        .client
        .list_objects_v2()
        .bucket(&sdk.bucket)
        .prefix(&prefix)
        .max_keys(limit.min(1000) as i32);
    if let Some(c) = cursor {
        req = req.start_after(format!("{key_prefix}{c}"));
    }
    let resp = req
        .send()
        .await
        .map_err(|e| classify("list", &sdk.bucket, e))?;
    let mut out = Vec::new();
    let mut last = None;
    for obj in resp.contents() {
        let Some(full) = obj.key() else { continue };
        let name = full.strip_prefix(key_prefix).unwrap_or(full);
        last = Some(name.to_owned());
        let Ok(key) = ObjectKey::parse(name, format) else {
            continue;
        };
        if model.is_some_and(|m| key.model_name() != m) {
            continue;
        }
        let size = obj.size().unwrap_or(0).max(0) as u64;
        let modified = obj.last_modified().map_or(0, |t| t.secs().max(0) as u64);
        out.push((name.to_owned(), key, size, modified));
    }
    let next = if resp.is_truncated().unwrap_or(false) {
        last
    } else {
        None
    };
    Ok((out, next))
}
