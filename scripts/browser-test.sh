#!/usr/bin/env bash
# browser-test.sh — the status page in a real headless browser.
#
#   scripts/browser-test.sh [KVROUTER_BINARY]     (make browser-test builds it)
#
# Starts `kvrouter up` (4 mock workers, router on a free loopback port),
# loads the status page in Debian's headless chromium before and after
# sending requests, and checks that it shows every worker as EXACT and the
# requests' decisions. Then scripts/browser-test.mjs (Node.js, no npm
# packages) drives chromium over the DevTools protocol at 1280 px and
# checks that the charts are drawn with data, that an opened explanation
# stays open across a refresh, and that nothing scrolls sideways. The screenshot goes to $SCREENSHOT (default
# /tmp/kvrouter-status-page.png, outside the checkout); UPDATE_DOCS_IMG=1
# also copies it to docs/img/status-page.png. Installs chromium with apt-get
# when it is missing (root, Debian). Loopback only; stops everything it
# started.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-bin/kvrouter}
[ -x "$bin" ] || { echo "browser-test: $bin not built (make build)" >&2; exit 2; }
shot=${SCREENSHOT:-${TMPDIR:-/tmp}/kvrouter-status-page.png}

if ! command -v chromium >/dev/null 2>&1; then
  echo "browser-test: installing Debian chromium"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
command -v curl >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq curl >/dev/null; }
command -v node >/dev/null 2>&1 || { echo "browser-test: needs Node.js 20 or later (node)" >&2; exit 2; }

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

# 1. Before any request: the page draws itself, lists the four workers as
#    EXACT and has no decisions yet.
chrome --dump-dom "$url/" >"$work/dom1.html"
grep -q '<h1>kvrouter</h1>' "$work/dom1.html" || fail "the status page did not load"
for w in mock-1 mock-2 mock-3 mock-4; do
  grep -q ">$w<" "$work/dom1.html" || fail "worker $w is not on the page"
done
exact=$(grep -o 'class="l EXACT">EXACT' "$work/dom1.html" | wc -l)
[ "$exact" -ge 4 ] || fail "want 4 EXACT workers on the page, found $exact"
grep -q '<tbody><tr class="empty">' "$work/dom1.html" || fail "decisions shown before any request"

# 2. Requests with a shared prefix: the second and later land where the
#    first left its KV blocks.
sys="You are a careful assistant. Answer briefly and precisely, citing the numbers you are given."
for q in "What is 2+2?" "What is 3+3?" "What is 4+4?" "What is 5+5?" "What is 6+6?"; do
  code=$(curl -s -o "$work/resp.json" -w '%{http_code}' "$url/v1/chat/completions" \
    -H 'Content-Type: application/json' \
    -d "{\"model\":\"Qwen/Qwen3-0.6B\",\"messages\":[{\"role\":\"system\",\"content\":\"$sys $sys $sys\"},{\"role\":\"user\",\"content\":\"$q\"}],\"max_tokens\":8}")
  [ "$code" = 200 ] || { cat "$work/resp.json" >&2; fail "chat completion answered $code"; }
done

# 3. Loaded again: the decisions are there, with their worker.
chrome --dump-dom "$url/" >"$work/dom2.html"
grep -q '<tbody><tr class="empty">' "$work/dom2.html" && fail "no decisions after 5 requests"
rows=$(grep -o 'candidates, kv</button>' "$work/dom2.html" | wc -l)
[ "$rows" -ge 5 ] || fail "want 5 decisions on the page, found $rows"
grep -q '<td class="l">chat</td>' "$work/dom2.html" || fail "decision rows do not name the endpoint"

# For the docs image: a few minutes of traffic first (DOCS_LOAD_SECONDS,
# default 180), eight clients each repeating its own long system prompt
# with varied questions and lengths, so the charts have something to show.
if [ "${UPDATE_DOCS_IMG:-}" = 1 ]; then
  secs=${DOCS_LOAD_SECONDS:-180}
  echo "browser-test: $secs s of traffic for the docs image"
  end=$(( $(date +%s) + secs ))
  clients=()
  for c in 1 2 3 4 5 6 7 8; do
    (
      p="Client $c: you are assistant number $c. $(printf 'Context line %s for client %s. ' $(seq 1 $((10 * c))) | head -c $((400 * c)))"
      i=0
      while [ "$(date +%s)" -lt "$end" ]; do
        i=$((i + 1))
        curl -s -o /dev/null "$url/v1/chat/completions" -H 'Content-Type: application/json' \
          -d "{\"model\":\"Qwen/Qwen3-0.6B\",\"messages\":[{\"role\":\"system\",\"content\":\"$p\"},{\"role\":\"user\",\"content\":\"Question $i?\"}],\"max_tokens\":$(( 16 + (i * 37 + c * 11) % 240 ))}" || true
        sleep "0.$(( (i * 7 + c) % 9 ))"
      done
    ) &
    clients+=($!)
  done
  wait "${clients[@]}"
fi

# 4. In the page (scripts/browser-test.mjs over the DevTools protocol, at
#    1280 px): charts with data, an explanation open across a refresh (the
#    page fetches its JSON every 5 s), no horizontal scroll; the screenshot
#    (outside the checkout unless asked for the docs).
mkdir -p "$(dirname "$shot")"
result=$(node --experimental-websocket scripts/browser-test.mjs "$url/" "$shot" "$work/profile.cdp" 2>>"$work/node.err") || true
case "$result" in
  PASS*) echo "browser-test: in the page: ${result#PASS }" ;;
  *) cat "$work/node.err" >&2; fail "in the page: ${result:-no result}" ;;
esac
[ -s "$shot" ] || fail "no screenshot written"
if [ "${UPDATE_DOCS_IMG:-}" = 1 ]; then
  cp "$shot" docs/img/status-page.png
  shot="$shot and docs/img/status-page.png"
fi
echo "browser-test: PASS (4 workers EXACT, $rows decisions, screenshot $shot)"
