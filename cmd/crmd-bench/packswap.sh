#!/usr/bin/env bash
# packswap.sh: the load run of rule packs applied while crmd serves.
#
# It starts crmd on a fresh SQLite database, applies the field-services
# example pack, and runs crmd-bench's create and get phases on leads (the
# pack's rules refuse some, set fields of all, and create a follow-up task
# for every web lead) twice: once undisturbed, then while a loop applies a
# new revision of the pack every second (two versions of one rule's message,
# alternately, so each apply is a real new revision that the server must
# load). Every request of both runs must succeed; compare the throughputs.
#
# A third run in between has the same loop write to the database each second
# without changing any pack (crmd key create): on SQLite a write from another
# process empties the server's page caches, which costs reads about a third of
# their throughput whatever the write is; this run tells that cost from the
# cost of swapping packs.
#
#	cmd/crmd-bench/packswap.sh [DURATION]
#	CRMD_BENCH_DB=postgres://postgres@127.0.0.1:5432/bench?sslmode=disable cmd/crmd-bench/packswap.sh
#
# DURATION is each phase's length (default 10s). CRMD_BENCH_DB is the
# database (an empty one: the run creates a business named bench); the
# default is a new SQLite file. It builds the two binaries into a temporary
# directory.
set -euo pipefail

cd "$(dirname "$0")/../.."
duration=${1:-10s}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

go build -o "$work/crmd" ./cmd/crmd
go build -o "$work/crmd-bench" ./cmd/crmd-bench
export CRMD_DB="${CRMD_BENCH_DB:-$work/crmd.db}"
crmd() { "$work/crmd" "$@"; }

crmd business create bench >/dev/null
key=$(crmd key create --business bench)
cp -r examples/field-services "$work/pack"
crmd pack apply --business bench "$work/pack" >/dev/null
"$work/crmd" serve --addr 127.0.0.1:18080 >"$work/serve.log" 2>&1 &
server=$!
for _ in $(seq 50); do
	curl -fsS -o /dev/null -H "Authorization: Bearer $key" http://127.0.0.1:18080/api/v1/leads?limit=1 && break
	sleep 0.1
done

bench() {
	"$work/crmd-bench" --url http://127.0.0.1:18080 --key "$key" --object leads \
		--phases create,get --duration "$duration" --pid "$server"
}

echo "== without pack swaps"
bench

echo "== with a write from another process every second (crmd key create), no pack change"
(
	while :; do
		crmd key create --business bench >/dev/null 2>&1
		sleep 1
	done
) &
writer=$!
bench
kill $writer
wait $writer 2>/dev/null || true

echo "== with a new pack revision applied every second"
(
	i=0
	while :; do
		i=$((i + 1))
		sed -i "s/^\(    error: web leads must give a work email address\).*/\1, not a free mail one (revision $i)/" \
			"$work/pack/leads.yaml"
		crmd pack apply --business bench "$work/pack" >/dev/null
		sleep 1
	done
) &
swapper=$!
bench
kill $swapper
wait $swapper 2>/dev/null || true
echo "== pack revisions"
crmd pack list --business bench | head -n 4
