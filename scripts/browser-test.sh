#!/usr/bin/env bash
# browser-test.sh — the status page in a real headless browser.
#
#   scripts/browser-test.sh [KVROUTER_BINARY]     (make browser-test builds it)
#
# Starts `kvrouter up` (4 mock workers, router on a free loopback port),
# loads the status page in Debian's headless chromium before and after
# sending requests, and checks that it shows every worker as EXACT, that the
# decisions of the requests appear (so the page reflects new state when it
# reloads), and that it asks the browser to refresh itself. Writes
# docs/img/status-page.png. Installs chromium with apt-get when it is missing
# (root, Debian). Loopback only; stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-bin/kvrouter}
[ -x "$bin" ] || { echo "browser-test: $bin not built (make build)" >&2; exit 2; }
shot=${SCREENSHOT:-docs/img/status-page.png}

if ! command -v chromium >/dev/null 2>&1; then
  echo "browser-test: installing Debian chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" up --port=0 --workers=4 --nats-port=-1 --data-dir="$work/data" --speedup-ratio=10 \
  >"$work/up.out" 2>"$work/up.err" &
pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(grep -o 'router at http://127\.0\.0\.1:[0-9]*' "$work/up.out" 2>/dev/null | sed 's/router at //' || true)
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/up.err" >&2; echo "browser-test: kvrouter up exited" >&2; exit 1; }
  sleep 0.2
done
[ -n "$url" ] || { cat "$work/up.err" >&2; echo "browser-test: kvrouter up printed no URL" >&2; exit 1; }
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/ready")" = 200 ] && break
  sleep 0.2
done
echo "browser-test: kvrouter up at $url"

chrome() {
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$work/profile.$RANDOM" \
    "$@" 2>>"$work/chromium.err"
}
fail() { echo "browser-test: FAIL: $*" >&2; exit 1; }

# 1. Before any request: the page loads, lists the four workers as EXACT,
#    has no decisions yet, and tells the browser to refresh.
chrome --dump-dom "$url/" >"$work/dom1.html"
grep -q '<h1>kvrouter</h1>' "$work/dom1.html" || fail "the status page did not load"
for w in mock-1 mock-2 mock-3 mock-4; do
  grep -q ">$w<" "$work/dom1.html" || fail "worker $w is not on the page"
done
exact=$(grep -o 'class="l EXACT">EXACT' "$work/dom1.html" | wc -l)
[ "$exact" -ge 4 ] || fail "want 4 EXACT workers on the page, found $exact"
grep -q 'no requests yet' "$work/dom1.html" || fail "decisions shown before any request"
grep -Eq 'http-equiv="refresh" content="[1-9][0-9]*"' "$work/dom1.html" || fail "the page does not refresh itself"

# 2. Requests with a shared prefix: the second and third land where the
#    first left its KV blocks.
sys="You are a careful assistant. Answer briefly and precisely, citing the numbers you are given."
for q in "What is 2+2?" "What is 3+3?" "What is 4+4?"; do
  code=$(curl -s -o "$work/resp.json" -w '%{http_code}' "$url/v1/chat/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"Qwen/Qwen3-0.6B\",\"messages\":[{\"role\":\"system\",\"content\":\"$sys $sys $sys\"},{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":8}")
  [ "$code" = 200 ] || { cat "$work/resp.json" >&2; fail "chat completion answered $code"; }
done

# 3. Loaded again (what the refresh does): the decisions are there, with
#    their worker, and the request total moved.
chrome --dump-dom "$url/" >"$work/dom2.html"
grep -q 'no requests yet' "$work/dom2.html" && fail "no decisions after 3 requests"
rows=$(grep -c 'candidates, policy' "$work/dom2.html" || true)
[ "$rows" -ge 3 ] || fail "want 3 decisions on the page, found $rows"
grep -q '<td class="l">chat</td>' "$work/dom2.html" || fail "decision rows do not name the endpoint"
cmp -s "$work/dom1.html" "$work/dom2.html" && fail "the page did not change after requests"

# 4. The screenshot for the docs.
mkdir -p "$(dirname "$shot")"
chrome --screenshot="$shot" --window-size=1400,1100 "$url/" >/dev/null
[ -s "$shot" ] || fail "no screenshot written"
echo "browser-test: PASS (4 workers EXACT, $rows decisions, screenshot $shot)"
