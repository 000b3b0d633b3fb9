#!/usr/bin/env bash
# A swarm run split over time-limited GPU leases: unpack the state that the last lease packed, run the swarm
# until SECONDS have passed (then SIGTERM: workers die, the run stays resumable), and pack the state into $OUT.
#   scripts/device_swarm.sh STATE.tgz|fresh SECONDS TARGET [swarm run options, e.g. --resume ID --wall-minutes 30]
# STATE.tgz holds swarm_home/ (kb.sqlite, the engines repo, each run's events.jsonl): what the last call left in
# $OUT/swarm_home.tgz. The home goes to $SWARM_DEVICE_HOME (default /opt/swarm_home): not /tmp, which evaluator
# workers see privately. The compile caches that baseline workers left (compile_cache/, tens of MB) travel apart,
# as $OUT/compile_cache.tgz, the newest seeds that fit in the 16 MiB a file of $OUT may weigh: carry it back in
# .device_state/compile_cache.tgz (ignored by git; $SWARM_COMPILE_CACHE names another), so the next call's first
# evaluations skip the cold Triton and inductor builds.
set -u -o pipefail
[ $# -ge 3 ] || { echo "usage: $0 STATE.tgz|fresh SECONDS TARGET [swarm run options]" >&2; exit 2; }
state=$1 seconds=$2 target=$3
shift 3
home=${SWARM_DEVICE_HOME:-/opt/swarm_home}
caches=${SWARM_COMPILE_CACHE:-.device_state/compile_cache.tgz}
cap=${SWARM_COMPILE_CACHE_BYTES:-$((15 << 20))}  # what a file of $OUT may weigh to come back, with a margin
out=${OUT:?set OUT to the folder that comes back}
if [ -d .whl ]; then source scripts/device_env.sh >/dev/null; fi  # the lent machine lacks some packages
rm -rf "$home" && mkdir -p "$home"
if [ "$state" != fresh ]; then
    tar -xzf "$state" -C "$home" --strip-components=1 || exit 2
fi
if [ -f "$caches" ]; then
    tar -xzf "$caches" -C "$home" || exit 2
fi
SWARM_HOME=$home timeout "$seconds" python3 -m swarm run "$target" "$@" > "$out/swarm.log" 2>&1
rc=$?
tail -n 40 "$out/swarm.log"
echo "swarm run exit code $rc (124: stopped at the $seconds s limit; --resume it in the next call)"
# the slim state: scratch dirs and engine checkouts are rebuilt on resume
shopt -s nullglob
(cd "$home" && tar -czf "$out/swarm_home.tgz" --transform 's,^,swarm_home/,' kb.sqlite engines runs/*/events.jsonl)
if [ -d "$home/compile_cache" ]; then
    # $OUT's files come back only up to 16 MiB each (session 22's whole cache did not): the most recently used seeds
    # that fit, newest first (an evaluation touches the seed it plants; ls skips the dot-named partial copies)
    packed=()
    for seed in $(ls -t "$home/compile_cache"); do
        (cd "$home" && tar -czf "$out/compile_cache.next.tgz" "${packed[@]/#/compile_cache/}" "compile_cache/$seed")
        [ "$(stat -c %s "$out/compile_cache.next.tgz")" -le "$cap" ] || break
        packed+=("$seed")
        mv "$out/compile_cache.next.tgz" "$out/compile_cache.tgz"
    done
    rm -f "$out/compile_cache.next.tgz"
    echo "compile caches packed: ${#packed[@]} of $(ls "$home/compile_cache" | wc -l) seeds (at most $cap bytes)"
fi
exit $rc
