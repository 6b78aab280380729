#!/usr/bin/env bash
# webhooks.sh: the load run of webhooks both ways.
#
# It starts crmd on a fresh database and runs crmd-bench, with its webhook
# receiver on 127.0.0.1:18190, through these phases:
#
#  1. creates of contacts under the field-services example pack, no
#     subscription: the API's write throughput without the outbox;
#  2. the same with a subscription to every created contact, disabled
#     (crmd webhook disable): each write also stores its event and delivery,
#     nothing is sent; the cost of the outbox;
#  3. the webhook enabled: the backlog of phase 2 goes out with no other
#     load; deliveries a second;
#  4. creates at a steady --rate (CRMD_BENCH_RATE, default 1000/s) with the
#     webhook live: each delivery's lag behind its event (p50, p99);
#  5. creates as fast as they go with the webhook live: writes and
#     deliveries sharing the machine;
#  6. contact forms posted to the field-services example's inbound webhook,
#     which maps them into leads under that pack's rules (a web lead gets a
#     follow-up task from an automation).
#
#	cmd/crmd-bench/webhooks.sh [DURATION]
#	CRMD_BENCH_DB=postgres://postgres@127.0.0.1:5432/bench?sslmode=disable cmd/crmd-bench/webhooks.sh
#
# DURATION is each timed phase's length (default 10s). CRMD_BENCH_DB is the
# database (an empty one: the run creates a business named bench); the
# default is a new SQLite file. It builds the two binaries into a temporary
# directory.
set -euo pipefail

cd "$(dirname "$0")/../.."
duration=${1:-10s}
rate=${CRMD_BENCH_RATE:-1000}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

go build -o "$work/crmd" ./cmd/crmd
go build -o "$work/crmd-bench" ./cmd/crmd-bench
export CRMD_DB="${CRMD_BENCH_DB:-$work/crmd.db}"
crmd() { "$work/crmd" "$@"; }

crmd business create bench >/dev/null 2>&1
key=$(crmd key create --business bench 2>/dev/null)
"$work/crmd" serve --addr 127.0.0.1:18080 --webhook-allow 127.0.0.0/8 --inbound-rate 1000000 >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 50); do
	curl -fsS -o /dev/null -H "Authorization: Bearer $key" http://127.0.0.1:18080/api/v1/contacts?limit=1 && break
	sleep 0.1
done

bench() {
	"$work/crmd-bench" --url http://127.0.0.1:18080 --key "$key" --duration "$duration" \
		--pid "$server" --receiver 127.0.0.1:18190 "$@" 2> >(grep -v ': running for \|requests, .* errors$\|deliveries: ' >&2)
}

cp -r examples/field-services "$work/pack"
# The pack makes the inbound webhook; its URL is shown this once.
inbound=$(crmd pack apply --business bench "$work/pack" 2>/dev/null | sed -n 's/^inbound webhook contact-form: //p')
sleep 1 # every process loads a new revision within a second

echo "== 1. creates, no subscription (the field-services pack applied)"
bench --object contacts --phases create

cat >"$work/pack/bench.yaml" <<'PACK'
pack: field-services
webhooks:
  - name: bench-receiver
    url: http://127.0.0.1:18190/hooks
    events: [contacts.created]
PACK
crmd pack apply --business bench "$work/pack" >/dev/null
crmd webhook disable --business bench bench-receiver 2>/dev/null
sleep 1

echo "== 2. creates, the subscription disabled: events and deliveries stored, none sent"
bench --object contacts --phases create

echo "== 3. the subscription enabled: the backlog of 2 goes out"
bench --phases deliveries &
delivering=$!
sleep 1
crmd webhook enable --business bench bench-receiver 2>/dev/null
wait $delivering

echo "== 4. creates at $rate a second, delivered as they commit"
bench --object contacts --phases create --rate "$rate"

echo "== 5. creates as fast as they go, delivered as they commit"
bench --object contacts --phases create

echo "== 6. contact forms posted to the inbound webhook (leads, under the field-services rules)"
bench --object leads --phases inbound --inbound "$inbound"

echo "== deliveries by state"
for s in pending succeeded failed; do
	echo "$s: $(crmd webhook deliveries --business bench --status "$s" --limit 10000000 | tail -n +2 | wc -l)"
done
