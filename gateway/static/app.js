// The ttsfarm page: submit a job, follow its WebSocket, play each PCM16 chunk as it arrives.
// Chunks are scheduled back to back on one AudioContext clock. Progress is mirrored into data-*
// attributes of #status so scripts (and tests) can read it. Each chunk brings the words that end in it
// (times in the job's audio, code-point offsets into the submitted text): #words shows the text with the
// word being spoken highlighted, found from the AudioContext clock through the chunks' schedule.
"use strict";

const $ = (id) => document.getElementById(id);
const statusEl = $("status");
const keyInput = $("key");

let ctx = null;       // the AudioContext, made on the first Speak (a user gesture)
let run = null;       // the current playback: {ws, sources, nextTime, startTime, ...}

function authHeaders() {
  const key = keyInput.value.trim();
  return key ? { Authorization: "Bearer " + key } : {};
}

function setStatus(values) {
  for (const [k, v] of Object.entries(values)) statusEl.dataset[k] = String(v);
  const d = statusEl.dataset;
  const total = Number(d.total) || 0;
  $("progress").max = Math.max(total, 1);
  $("progress").value = Number(d.segments) || 0;
  if (d.state === "error") {
    $("summary").textContent = "Error " + (d.error || "") + ": " + (d.message || "");
  } else {
    const words = { idle: "Ready.", submitting: "Submitting…", streaming: "Streaming…", done: "Done.", stopped: "Stopped." };
    $("summary").textContent = words[d.state] || d.state;
  }
  const parts = [`segments ${d.segments}/${total}`, `chunks ${d.chunks}`];
  if (d.firstChunkMs) parts.push(`first audio after ${d.firstChunkMs} ms`);
  parts.push(`played ${Number(d.playedSeconds).toFixed(1)} / ${Number(d.scheduledSeconds).toFixed(1)} s`);
  $("detail").textContent = parts.join(" · ");
}

async function loadVoices() {
  const select = $("voice");
  try {
    const res = await fetch("/v1/voices", { headers: authHeaders() });
    const body = await res.json();
    if (!res.ok) throw new Error(body.error ? body.error.message : res.statusText);
    select.replaceChildren(...body.voices.map((v) => {
      const opt = new Option(`${v.id} (${v.languages.join(", ")})`, v.id);
      opt.selected = v.default;
      return opt;
    }));
    statusEl.dataset.voices = String(body.voices.length);
  } catch (err) {
    setStatus({ state: "error", error: "VOICES", message: String(err.message || err) });
  }
}

function wsUrl(path) {
  const u = new URL(path, window.location.href);
  u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
  u.searchParams.set("binary", "1");
  const key = keyInput.value.trim();
  if (key) u.searchParams.set("api_key", key);
  return u.toString();
}

function schedule(meta, data) {
  const ints = new Int16Array(data);
  const floats = new Float32Array(ints.length);
  for (let i = 0; i < ints.length; i++) floats[i] = ints[i] / 32768;
  const buffer = ctx.createBuffer(1, Math.max(floats.length, 1), meta.sample_rate);
  buffer.copyToChannel(floats, 0);
  const source = ctx.createBufferSource();
  source.buffer = buffer;
  source.connect(ctx.destination);
  // back to back; after an underrun start again slightly ahead of the clock
  const at = Math.max(run.nextTime, ctx.currentTime + 0.05);
  if (run.startTime === null) run.startTime = at;
  source.start(at);
  run.nextTime = at + buffer.duration;
  run.timeline.push({ at, jobStart: run.jobTime, duration: buffer.duration });
  run.jobTime += buffer.duration;
  if (meta.words && meta.words.length) addWords(meta.words);
  run.sources.push(source);
  run.scheduledSeconds += buffer.duration;
  const first = run.firstChunkMs === null;
  if (first) run.firstChunkMs = Math.round(performance.now() - run.t0);
  setStatus({
    chunks: run.chunks, segments: meta.seg + 1, scheduled: run.sources.length,
    scheduledSeconds: run.scheduledSeconds.toFixed(3), firstChunkMs: run.firstChunkMs,
    lastSeq: meta.seq, sampleRate: meta.sample_rate,
  });
}

function renderText(text) {
  run.chars = Array.from(text);  // offsets are code points, not UTF-16 units
  run.words = [];
  $("words").replaceChildren(document.createTextNode(text));
}

function addWords(words) {
  run.words.push(...words);
  const box = $("words");
  const nodes = [];
  let at = 0;
  run.words.forEach((w, i) => {
    if (w.char_start > at) nodes.push(document.createTextNode(run.chars.slice(at, w.char_start).join("")));
    const span = document.createElement("span");
    span.className = "word";
    span.dataset.index = String(i);
    span.textContent = run.chars.slice(w.char_start, w.char_end).join("");
    nodes.push(span);
    at = Math.max(at, w.char_end);
  });
  nodes.push(document.createTextNode(run.chars.slice(at).join("")));
  box.replaceChildren(...nodes);
  statusEl.dataset.words = String(run.words.length);
}

function jobTimeNow() {
  // the chunk playing now and how far into it the clock is; null before the first and in gaps
  for (let i = run.timeline.length - 1; i >= 0; i--) {
    const c = run.timeline[i];
    if (ctx.currentTime >= c.at) return ctx.currentTime < c.at + c.duration ? c.jobStart + (ctx.currentTime - c.at) : null;
  }
  return null;
}

function highlight() {
  const t = jobTimeNow();
  const index = t === null ? -1 : run.words.findIndex((w) => w.start_s <= t && t < w.end_s);
  if (String(index) === statusEl.dataset.wordIndex) return;
  for (const el of document.querySelectorAll("#words .speaking")) el.classList.remove("speaking");
  const el = document.querySelector(`#words [data-index="${index}"]`);
  if (el) el.classList.add("speaking");
  statusEl.dataset.wordIndex = String(index);
  if (index >= 0) {
    statusEl.dataset.word = run.words[index].text;
    statusEl.dataset.wordsSpoken = String(Math.max(Number(statusEl.dataset.wordsSpoken) || 0, index + 1));
  }
}

function tick() {
  if (run && ctx && run.startTime !== null) {
    const played = Math.min(Math.max(ctx.currentTime - run.startTime, 0), run.scheduledSeconds);
    setStatus({ playedSeconds: played.toFixed(3), playing: played > 0, contextTime: ctx.currentTime.toFixed(3) });
    highlight();
  }
  if (ctx) statusEl.dataset.contextState = ctx.state;
}

async function speak(event) {
  event.preventDefault();
  stop(false);
  ctx = ctx || new AudioContext();
  await ctx.resume();
  run = { ws: null, sources: [], nextTime: 0, startTime: null, t0: performance.now(), chunks: 0,
          firstChunkMs: null, scheduledSeconds: 0, meta: null, timeline: [], jobTime: 0, chars: [], words: [] };
  const mine = run;
  for (const k of ["firstChunkMs", "error", "message", "job", "lastSeq", "words", "word", "wordIndex", "wordsSpoken"]) {
    delete statusEl.dataset[k];
  }
  renderText($("text").value);
  setStatus({ state: "submitting", chunks: 0, segments: 0, total: 0, scheduled: 0, scheduledSeconds: 0,
              playedSeconds: 0, playing: false });
  $("speak").disabled = true;
  $("stop").disabled = false;
  try {
    const res = await fetch("/v1/jobs", {
      method: "POST",
      headers: { "Content-Type": "application/json", ...authHeaders() },
      body: JSON.stringify({ text: $("text").value, voice: $("voice").value || null, format: "wav",
                             speed: Number($("speed").value) || 1 }),
    });
    const job = await res.json();
    if (!res.ok) throw Object.assign(new Error(job.error.message), { code: job.error.code });
    if (run !== mine) return;
    setStatus({ state: "streaming", job: job.id, total: job.segments });
    const ws = new WebSocket(wsUrl(job.links.stream));
    ws.binaryType = "arraybuffer";
    mine.ws = ws;
    ws.onmessage = (msg) => {
      if (run !== mine) return;
      if (typeof msg.data !== "string") {
        mine.chunks += 1;
        schedule(mine.meta, msg.data);
        return;
      }
      const m = JSON.parse(msg.data);
      if (m.type === "chunk") mine.meta = m;
      else if (m.type === "done") finish({ state: "done", segments: statusEl.dataset.total, duration: m.duration_s });
      else if (m.type === "error") finish({ state: "error", error: m.error.code, message: m.error.message });
    };
    ws.onclose = (ev) => {
      if (run === mine && statusEl.dataset.state === "streaming") {
        finish({ state: "error", error: "DISCONNECTED", message: `stream closed (${ev.code})` });
      }
    };
  } catch (err) {
    finish({ state: "error", error: err.code || "NETWORK", message: String(err.message || err) });
  }
}

function finish(values) {
  setStatus(values);
  $("speak").disabled = false;
  $("stop").disabled = true;
}

function stop(show = true) {
  if (!run) return;
  const { ws, sources } = run;
  if (ws && ws.readyState === WebSocket.OPEN) {
    ws.send(JSON.stringify({ type: "cancel" }));
    ws.close();
  }
  for (const s of sources) { try { s.stop(); } catch (e) { /* not started */ } }
  if (show) finish({ state: "stopped" });
  run = null;
}

keyInput.value = localStorage.getItem("ttsfarm.key") || "";
keyInput.addEventListener("change", () => { localStorage.setItem("ttsfarm.key", keyInput.value.trim()); loadVoices(); });
$("form").addEventListener("submit", speak);
$("stop").addEventListener("click", () => stop(true));
setInterval(tick, 50);
loadVoices();
