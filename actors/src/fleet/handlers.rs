//! The [`FleetIndex`]'s message handlers: each message is one script call ([`FleetIndex::run`])
//! with its arguments laid out as the script reads them, and its reply parsed back.
//!
//! Invariants:
//! - A handler never mutates object state itself: the script does, atomically on the server;
//!   the actor's only state touched here is the queue of unlocks, which rides with the next
//!   call or is flushed within [`super::UNLOCK_FLUSH`].
//! - A reply of an unexpected shape is a [`FleetError::Index`] naming the script, never a
//!   default value.

use actix::prelude::*;
use redis::Value;

use super::*;
pub(super) fn bad_reply(what: &str, v: &Value) -> FleetError {
    FleetError::Index(format!("unexpected reply to {what}: {v:?}"))
}

pub(super) fn parse_int(v: Value) -> Result<i64, FleetError> {
    match v {
        Value::Int(n) => Ok(n),
        other => Err(bad_reply("an integer script", &other)),
    }
}

pub(super) fn parse_count(v: Value) -> Result<u64, FleetError> {
    parse_int(v).map(|n| n.max(0) as u64)
}

pub(super) fn parse_strings(what: &str, v: Value) -> Result<Vec<String>, FleetError> {
    redis::from_redis_value::<Vec<String>>(v.clone()).map_err(|_| bad_reply(what, &v))
}

/// `args`, then per object its name, salt, size and whether the shadows sample it (`1` or
/// `0`).
pub(super) fn object_args(mut args: Vec<String>, objects: Vec<FleetObject>) -> Vec<String> {
    args.reserve(objects.len() * 4);
    for o in objects {
        args.extend([o.name, o.salt, o.size.to_string(), flag(o.sampled)]);
    }
    args
}

/// `args`, then per name the name and whether the shadows sample it (`1` or `0`).
pub(super) fn name_args(mut args: Vec<String>, names: Vec<FleetName>) -> Vec<String> {
    args.reserve(names.len() * 2);
    for n in names {
        args.extend([n.name, flag(n.sampled)]);
    }
    args
}

/// A flag as a script argument.
pub(super) fn flag(b: bool) -> String {
    u8::from(b).to_string()
}

pub(super) fn parse_round(v: Value) -> Result<Round, FleetError> {
    let Value::Array(items) = &v else {
        return Err(bad_reply("round", &v));
    };
    match items.first() {
        Some(Value::Int(0)) => Ok(Round::Under),
        Some(Value::Int(-1)) => Ok(Round::Busy),
        Some(Value::Int(1)) => {
            let flat = parse_strings("round", Value::Array(items[1..].to_vec()))?;
            Ok(Round::Claimed(
                flat.chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].parse().unwrap_or(0)))
                    .collect(),
            ))
        }
        _ => Err(bad_reply("round", &v)),
    }
}

pub(super) fn parse_usage(v: Value) -> Result<FleetUsage, FleetError> {
    let flat = parse_strings("usage", v)?;
    let mut u = FleetUsage::default();
    for pair in flat.chunks_exact(2) {
        let n = pair[1].parse::<i64>().unwrap_or(0).max(0) as u64;
        match pair[0].as_str() {
            "bytes" => u.bytes = n,
            "objects" => u.objects = n,
            "claimed" => u.claimed = n,
            f if f.starts_with("pending:") => u.pending += n,
            f if f.starts_with("quota:") => {
                u.quotas.insert(f["quota:".len()..].to_string(), n);
            }
            f => {
                if let Some(salt) = f.strip_prefix("salt:") {
                    if n > 0 {
                        u.by_salt.insert(salt.to_string(), n);
                    }
                }
            }
        }
    }
    Ok(u)
}

impl FleetIndex {
    /// `stored.lua`'s arguments for `msg`, with a round's (`round_args`; none: empty).
    fn stored_args(&mut self, msg: FleetStored, round: Vec<String>) -> Vec<String> {
        // The writes that end: their epochs leave the node's record and the index's writes in
        // flight. One write's names share one epoch; a batch that mixes writes gives its
        // oldest, and 0 (not added) when one of its names had no announcement known.
        let ended: Vec<u64> = msg
            .ended_names
            .iter()
            .map(|name| self.write_ended(name))
            .collect();
        let epoch = ended.iter().copied().min().unwrap_or(0);
        let mut epochs: Vec<u64> = ended.into_iter().filter(|&e| e > 0).collect();
        epochs.sort_unstable();
        epochs.dedup();
        let mut args = vec![
            self.config.node.clone(),
            u8::from(msg.written).to_string(),
            msg.ended_bytes.to_string(),
            epoch.to_string(),
            epochs.len().to_string(),
        ];
        args.extend(epochs.iter().map(u64::to_string));
        args.push(round.len().to_string());
        args.extend(round);
        object_args(args, msg.objects)
    }

    /// A round's arguments after the node (`run_round` in rounds.lua).
    fn round_args(&self, msg: &FleetRound) -> Vec<String> {
        vec![
            self.config.ttl.as_millis().to_string(),
            msg.capacity.to_string(),
            msg.watermark.to_string(),
            msg.ratio.to_string(),
            if msg.per_salt { "per_salt" } else { "capacity" }.to_string(),
            msg.ahead.to_string(),
            u8::from(msg.catch_up).to_string(),
            msg.waiting.to_string(),
        ]
    }
}

impl Handler<FleetStored> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetStored, _: &mut Self::Context) -> Self::Result {
        let args = self.stored_args(msg, Vec::new());
        self.run(|s| &s.stored, args, parse_usage)
    }
}

impl Handler<FleetStoredRound> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(FleetUsage, Round), FleetError>>;

    fn handle(&mut self, msg: FleetStoredRound, _: &mut Self::Context) -> Self::Result {
        let round = self.round_args(&msg.round);
        let args = self.stored_args(msg.stored, round);
        self.run(
            |s| &s.stored,
            args,
            |v| {
                let pair = match v {
                    Value::Array(items) => <[Value; 2]>::try_from(items).map_err(Value::Array),
                    other => Err(other),
                };
                match pair {
                    Ok([usage, round]) => Ok((parse_usage(usage)?, parse_round(round)?)),
                    Err(other) => Err(bad_reply("stored with a round", &other)),
                }
            },
        )
    }
}

impl Handler<FleetWriting> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Announced, FleetError>>;

    fn handle(&mut self, msg: FleetWriting, _: &mut Self::Context) -> Self::Result {
        let args = vec![
            self.config.node.clone(),
            msg.bytes.to_string(),
            msg.limit.unwrap_or(0).to_string(),
        ];
        let names = msg.names;
        Box::pin(
            self.run(
                |s| &s.writing,
                args,
                |v| match v {
                    Value::Array(mut items) if items.len() >= 2 => {
                        let started = parse_int(items.remove(0))? == 1;
                        let epoch = parse_count(items.remove(0))?;
                        let usage = parse_usage(Value::Array(items))?;
                        Ok((Announced { started, usage }, epoch))
                    }
                    v => Err(bad_reply("writing", &v)),
                },
            )
            .map(move |res, act, _| {
                let (announced, epoch) = res?;
                if announced.started {
                    for name in names {
                        act.writes.entry(name).or_default().push_back(epoch);
                    }
                }
                Ok(announced)
            }),
        )
    }
}

impl Handler<FleetLockNames> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Vec<FleetLock>, FleetError>>;

    fn handle(&mut self, msg: FleetLockNames, _: &mut Self::Context) -> Self::Result {
        self.count_locks(msg.0.iter().map(|n| n.name.as_str()));
        let sampled: String = msg
            .0
            .iter()
            .map(|n| if n.sampled { '1' } else { '0' })
            .collect();
        let names: Vec<String> = msg.0.into_iter().map(|n| n.name).collect();
        let mut args = vec![self.config.node.clone(), sampled];
        args.extend(names.iter().cloned());
        Box::pin(
            self.run(
                |s| &s.lock,
                args,
                |v| {
                    let codes = redis::from_redis_value::<Vec<i64>>(v.clone())
                        .map_err(|_| bad_reply("lock", &v))?;
                    Ok(codes
                        .into_iter()
                        .map(|c| match c {
                            c if c < 0 => FleetLock::Deleting,
                            0 => FleetLock::Unknown,
                            size => FleetLock::Known(size as u64),
                        })
                        .collect::<Vec<_>>())
                },
            )
            .map(move |res, act, _| {
                match &res {
                    // The refused ones were not locked: their counts go back.
                    Ok(outcomes) if outcomes.len() == names.len() => {
                        let refused = names
                            .into_iter()
                            .zip(outcomes)
                            .filter(|(_, o)| **o == FleetLock::Deleting)
                            .map(|(n, _)| n);
                        act.uncount_locks(refused, false);
                    }
                    // Unknown: the script may have run. Released like unlocks (a name not
                    // in the node's set leaves it as a no-op).
                    _ => act.uncount_locks(names, true),
                }
                res
            }),
        )
    }
}

impl Handler<FleetUnlock> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(), FleetError>>;

    fn handle(&mut self, msg: FleetUnlock, _: &mut Self::Context) -> Self::Result {
        self.uncount_locks(msg.0, true);
        self.unlock_now()
    }
}

impl Handler<FleetUnlockSoon> for FleetIndex {
    type Result = ();

    fn handle(&mut self, msg: FleetUnlockSoon, ctx: &mut Self::Context) {
        self.uncount_locks(msg.0, true);
        if !self.flush_due && !self.unlocks.is_empty() {
            self.flush_due = true;
            ctx.run_later(UNLOCK_FLUSH, |act, ctx| act.flush_unlocks(ctx));
        }
    }
}

impl Handler<FleetTouch> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(), FleetError>>;

    fn handle(&mut self, msg: FleetTouch, _: &mut Self::Context) -> Self::Result {
        self.run(|s| &s.touch, name_args(Vec::new(), msg.0), |_| Ok(()))
    }
}

impl FleetIndex {
    fn lease_args(&self, lease: Lease) -> Vec<String> {
        let (name, ttl) = match lease {
            Lease::Evict => ("lease", self.config.ttl),
            Lease::Listing(period) => ("listing", period),
        };
        vec![
            self.config.node.clone(),
            ttl.as_millis().to_string(),
            name.to_string(),
        ]
    }
}

impl Handler<FleetLease> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<bool, FleetError>>;

    fn handle(&mut self, msg: FleetLease, _: &mut Self::Context) -> Self::Result {
        let args = self.lease_args(msg.0);
        self.run(|s| &s.lease, args, |v| parse_int(v).map(|n| n == 1))
    }
}

impl Handler<FleetLeaseRelease> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<(), FleetError>>;

    fn handle(&mut self, msg: FleetLeaseRelease, _: &mut Self::Context) -> Self::Result {
        let mut args = self.lease_args(msg.0);
        args.remove(1);
        self.run(|s| &s.lease_release, args, |_| Ok(()))
    }
}

#[cfg(test)]
impl Handler<FleetCandidates> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Vec<(String, u64)>, FleetError>>;

    fn handle(&mut self, msg: FleetCandidates, _: &mut Self::Context) -> Self::Result {
        let args = vec![msg.limit.to_string(), msg.scan.max(msg.limit).to_string()];
        self.run(
            |s| &s.candidates,
            args,
            |v| {
                let flat = parse_strings("candidates", v)?;
                Ok(flat
                    .chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].parse().unwrap_or(0)))
                    .collect())
            },
        )
    }
}

impl Handler<FleetRound> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Round, FleetError>>;

    fn handle(&mut self, msg: FleetRound, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![self.config.node.clone()];
        args.extend(self.round_args(&msg));
        self.run(|s| &s.round, args, parse_round)
    }
}

impl Handler<FleetSetQuota> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Option<u64>, FleetError>>;

    fn handle(&mut self, msg: FleetSetQuota, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![msg.salt];
        args.extend(msg.limit.map(|l| l.to_string()));
        self.run(
            |s| &s.quota,
            args,
            |v| parse_int(v).map(|old| u64::try_from(old).ok()),
        )
    }
}

impl Handler<FleetClaim> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<Vec<String>, FleetError>>;

    fn handle(&mut self, msg: FleetClaim, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![self.config.node.clone()];
        args.extend(msg.0);
        self.run(|s| &s.claim, args, |v| parse_strings("claim", v))
    }
}

impl Handler<FleetRelease> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetRelease, _: &mut Self::Context) -> Self::Result {
        let mut args = vec![
            self.config.node.clone(),
            u8::from(msg.evicted).to_string(),
            msg.removed.len().to_string(),
        ];
        args.extend(msg.removed);
        args.extend(msg.kept);
        self.run(|s| &s.release, args, parse_usage)
    }
}

impl Handler<FleetVanished> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetVanished, _: &mut Self::Context) -> Self::Result {
        self.run(|s| &s.vanished, msg.0, parse_usage)
    }
}

impl Handler<FleetSyncStart> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<u64, FleetError>>;

    fn handle(&mut self, _: FleetSyncStart, _: &mut Self::Context) -> Self::Result {
        let args = vec![self.config.node.clone()];
        self.run(|s| &s.sync_start, args, parse_count)
    }
}

impl Handler<FleetSyncPage> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<u64, FleetError>>;

    fn handle(&mut self, msg: FleetSyncPage, _: &mut Self::Context) -> Self::Result {
        let args = object_args(vec![self.config.node.clone()], msg.0);
        self.run(|s| &s.sync_page, args, parse_count)
    }
}

impl Handler<FleetSyncEnd> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, msg: FleetSyncEnd, _: &mut Self::Context) -> Self::Result {
        let args = vec![self.config.node.clone(), msg.start.to_string()];
        self.run(|s| &s.sync_end, args, parse_usage)
    }
}

impl Handler<GetFleetUsage> for FleetIndex {
    type Result = ResponseActFuture<Self, Result<FleetUsage, FleetError>>;

    fn handle(&mut self, _: GetFleetUsage, _: &mut Self::Context) -> Self::Result {
        self.run(|s| &s.usage, Vec::new(), parse_usage)
    }
}

impl Handler<GetFleetStatus> for FleetIndex {
    type Result = MessageResult<GetFleetStatus>;

    fn handle(&mut self, _: GetFleetStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.status.clone())
    }
}
