//! The server-side assignors of consumer-protocol groups (KIP-848, `group.remote.assignor`):
//! `uniform`, Kafka's default, and `range`. Each is a pure function from the members'
//! resolved subscriptions (and, for `uniform`, the previous target assignment, to stay sticky)
//! to the new target assignment; [`crate::consumer_group`] then reconciles each member
//! towards it.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::consumer_group::{Partitions, TopicInfo};

/// The target assignment of `assignor` for `subscriptions` (member → its subscribed topics),
/// sticky to `previous`.
pub fn assign(
    assignor: &str,
    subscriptions: &BTreeMap<String, Vec<TopicInfo>>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    match assignor {
        "range" => range(subscriptions),
        _ => uniform(subscriptions, previous),
    }
}

/// Kafka's range assignor: each topic's partitions in ranges over its subscribers in member-id
/// order, the first `partitions % members` getting one more.
fn range(subscriptions: &BTreeMap<String, Vec<TopicInfo>>) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = subscriptions
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    let mut by_topic: BTreeMap<Uuid, (i32, Vec<&String>)> = BTreeMap::new();
    for (member, topics) in subscriptions {
        for t in topics {
            by_topic
                .entry(t.id)
                .or_insert((t.partitions, Vec::new()))
                .1
                .push(member);
        }
    }
    for (topic, (count, members)) in by_topic {
        let n = members.len() as i32;
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in members.into_iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            let ps: BTreeSet<i32> = (next..next + take).collect();
            next += take;
            if !ps.is_empty() {
                out.get_mut(member).expect("member").insert(topic, ps);
            }
        }
    }
    out
}

/// The uniform assignor (Kafka's default): every partition of a subscribed topic goes to one
/// of its subscribers so that counts differ by at most one where subscriptions allow, moving
/// as few partitions as possible from `previous`.
fn uniform(
    subscriptions: &BTreeMap<String, Vec<TopicInfo>>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    let subscribed = |member: &str, topic: Uuid| {
        subscriptions
            .get(member)
            .is_some_and(|ts| ts.iter().any(|t| t.id == topic))
    };
    let mut all: Vec<(Uuid, i32)> = subscriptions
        .values()
        .flatten()
        .flat_map(|t| (0..t.partitions).map(move |p| (t.id, p)))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    all.sort();
    let mut owner: BTreeMap<(Uuid, i32), String> = BTreeMap::new();
    // Sticky: a partition stays with its previous member while still subscribed.
    for (member, parts) in previous {
        for (topic, ps) in parts {
            for p in ps {
                if subscribed(member, *topic) && all.binary_search(&(*topic, *p)).is_ok() {
                    owner.insert((*topic, *p), member.clone());
                }
            }
        }
    }
    let mut count: BTreeMap<String, usize> = subscriptions.keys().map(|m| (m.clone(), 0)).collect();
    for m in owner.values() {
        *count.get_mut(m).expect("member") += 1;
    }
    // The rest to the least loaded subscriber.
    for tp in &all {
        if owner.contains_key(tp) {
            continue;
        }
        let best = count
            .iter()
            .filter(|(m, _)| subscribed(m, tp.0))
            .min_by_key(|(m, n)| (**n, (*m).clone()))
            .map(|(m, _)| m.clone());
        if let Some(m) = best {
            *count.get_mut(&m).expect("member") += 1;
            owner.insert(*tp, m);
        }
    }
    // Balance: move a partition from a member with two more than a subscriber that can take
    // it, until none can move (each move lowers the sum of squares, so this ends).
    loop {
        let mut moved = false;
        for tp in &all {
            let Some(from) = owner.get(tp).cloned() else {
                continue;
            };
            let to = count
                .iter()
                .filter(|(m, n)| subscribed(m, tp.0) && **n + 1 < count[&from])
                .min_by_key(|(m, n)| (**n, (*m).clone()))
                .map(|(m, _)| m.clone());
            if let Some(to) = to {
                *count.get_mut(&from).expect("member") -= 1;
                *count.get_mut(&to).expect("member") += 1;
                owner.insert(*tp, to);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Partitions> = subscriptions
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    for ((topic, p), m) in owner {
        out.get_mut(&m)
            .expect("member")
            .entry(topic)
            .or_default()
            .insert(p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(name: &str, partitions: i32) -> TopicInfo {
        TopicInfo {
            name: name.into(),
            id: Uuid::from_u128(name.len() as u128),
            partitions,
        }
    }

    fn counts(target: &BTreeMap<String, Partitions>) -> Vec<usize> {
        target
            .values()
            .map(|p| p.values().map(BTreeSet::len).sum())
            .collect()
    }

    #[test]
    fn uniform_balances_and_keeps_what_it_can() {
        let t = topic("t", 7);
        let two: BTreeMap<String, Vec<TopicInfo>> =
            [("a".into(), vec![t.clone()]), ("b".into(), vec![t.clone()])].into();
        let first = assign("uniform", &two, &BTreeMap::new());
        assert_eq!(counts(&first), vec![4, 3]);
        // A third member takes two partitions; nobody else loses more than needed.
        let mut three = two.clone();
        three.insert("c".into(), vec![t.clone()]);
        let second = assign("uniform", &three, &first);
        let mut c = counts(&second);
        c.sort();
        assert_eq!(c, vec![2, 2, 3]);
        for m in ["a", "b"] {
            let kept = second[m][&t.id]
                .iter()
                .filter(|p| first[m][&t.id].contains(p))
                .count();
            assert_eq!(kept, second[m][&t.id].len(), "{m} only gave partitions up");
        }
        // Every partition exactly once.
        let all: Vec<i32> = second
            .values()
            .flat_map(|p| p[&t.id].iter().copied())
            .collect();
        assert_eq!(all.iter().copied().collect::<BTreeSet<_>>().len(), 7);
        assert_eq!(all.len(), 7);
    }

    #[test]
    fn uniform_respects_unequal_subscriptions() {
        let (x, y) = (topic("x", 4), topic("yy", 2));
        let subs: BTreeMap<String, Vec<TopicInfo>> = [
            ("a".into(), vec![x.clone()]),
            ("b".into(), vec![x.clone(), y.clone()]),
        ]
        .into();
        let target = assign("uniform", &subs, &BTreeMap::new());
        assert!(
            !target["a"].contains_key(&y.id),
            "a does not subscribe to yy"
        );
        assert_eq!(counts(&target), vec![3, 3]);
    }
}
