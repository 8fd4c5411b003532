//! Every backend request opens a `kvtier.request` span with the adapter, operation, key
//! count and bytes, and records its outcome: a host's `tracing` subscriber (or an
//! OpenTelemetry layer on it) sees each store, lookup, load and delete. Fields are counts and
//! names only.

use kvtier_testkit as support;

use bytes::BytesMut;
use kvtier::{AdapterConfig, Tier, TierConfig};
use support::{key, payload};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// What the layer saw: (span id, field, value as text), from creation and later records.
type Seen = (u64, String, String);

struct Capture(flume::Sender<Seen>);

struct Fields<'a>(u64, &'a flume::Sender<Seen>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = self
            .1
            .send((self.0, field.name().to_owned(), format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = self
            .1
            .send((self.0, field.name().to_owned(), value.to_owned()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "kvtier.request" {
            attrs.record(&mut Fields(id.into_u64(), &self.0));
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        values.record(&mut Fields(id.into_u64(), &self.0));
    }
}

#[actix_rt::test]
async fn every_request_has_a_span_with_its_outcome() {
    let (tx, rx) = flume::unbounded();
    let subscriber = tracing_subscriber::registry()
        .with(Capture(tx).with_filter(tracing_subscriber::filter::LevelFilter::DEBUG));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let tier = Tier::start(&TierConfig::with_adapters(vec![AdapterConfig::memory()]))
        .await
        .unwrap();
    assert!(tier
        .store(vec![key(1), key(2)], vec![payload(1, 100), payload(2, 100)])
        .await
        .unwrap()
        .success());
    tier.lookup_and_lock(vec![key(1), key(3)]).await.unwrap();
    let r = tier.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
    assert!(r.hits.get(0));
    tier.unlock(vec![key(1)]);
    tier.delete(vec![key(2)]).await.unwrap();
    tier.close().await;

    // Group the fields by span.
    let mut spans: std::collections::BTreeMap<u64, std::collections::BTreeMap<String, String>> =
        Default::default();
    for (id, field, value) in rx.try_iter() {
        spans.entry(id).or_default().insert(field, value);
    }
    let find = |op: &str| {
        spans
            .values()
            .find(|f| f.get("op").map(String::as_str) == Some(op))
            .unwrap_or_else(|| panic!("no {op} span in {spans:?}"))
            .clone()
    };
    let store = find("store");
    assert_eq!(store["adapter"], "0");
    assert_eq!(store["adapter_type"], "memory");
    assert_eq!(
        (store["keys"].as_str(), store["bytes"].as_str()),
        ("2", "200")
    );
    assert_eq!((store["ok"].as_str(), store["failed"].as_str()), ("2", "0"));
    let lookup = find("lookup");
    assert_eq!(
        (
            lookup["keys"].as_str(),
            lookup["ok"].as_str(),
            lookup["failed"].as_str()
        ),
        ("2", "1", "1")
    );
    let load = find("load");
    assert_eq!((load["bytes"].as_str(), load["ok"].as_str()), ("100", "1"));
    let delete = find("delete");
    assert_eq!((delete["keys"].as_str(), delete["ok"].as_str()), ("1", "1"));
    // Only these fields, ever: counts and names, never a key or a payload.
    for fields in spans.values() {
        for name in fields.keys() {
            assert!(
                [
                    "adapter",
                    "adapter_type",
                    "op",
                    "keys",
                    "bytes",
                    "ok",
                    "failed"
                ]
                .contains(&name.as_str()),
                "unexpected span field {name}"
            );
        }
    }
}
