// Loads the wasm-bindgen output (web/pkg, built by web/build.sh), runs the demo workload and
// renders its report. The result marker is #result[data-status] (pending, pass, fail, error);
// the full report is also left in window.demoReport for tests, and the last training run in
// window.trainReport. The model select box picks the live model: the digits CNN (web/train.rs,
// the default) or the character transformer (web/train_transformer.rs).
import init, {
  run_demo, train_start, train_step, char_train_start, char_train_step,
} from './pkg/web_demo.js';

const $ = (id) => document.getElementById(id);

function finish(status, text) {
  $('result').dataset.status = status;
  $('result').textContent = text;
}

function render(r, gpuInfo) {
  const a = r.adapter;
  // wgpu's adapter name is empty when the browser masks it; GPUAdapterInfo says more.
  const web = gpuInfo ? [gpuInfo.vendor, gpuInfo.architecture, gpuInfo.description]
    .filter(Boolean).join(' / ') : '';
  const software = a.device_type === 'Cpu' ? ' · software WebGPU: timings are not a real GPU\'s' : '';
  $('adapter').textContent =
    `${a.name || web || '(name hidden by the browser)'} · ${a.backend} · ${a.device_type}` +
    `${a.driver ? ' · ' + a.driver : ''} · f16 ${a.f16 ? 'yes' : 'no'}${software}`;
  const body = $('steps').querySelector('tbody');
  for (const s of r.steps) {
    const tr = document.createElement('tr');
    const speedup = s.median_ms > 0 ? `${(s.cpu_ms / s.median_ms).toFixed(1)}x` : '–';
    const cells = [s.name, `[${s.shape.join(', ')}]`, s.first_ms.toFixed(2), s.median_ms.toFixed(2),
      s.cpu_ms.toFixed(2), speedup,
      s.max_abs_err.toExponential(2), s.tol.toExponential(2), s.pass ? 'pass' : 'FAIL'];
    for (const c of cells) {
      const td = document.createElement('td');
      td.textContent = c;
      tr.appendChild(td);
    }
    tr.lastChild.className = s.pass ? 'ok' : 'bad';
    body.appendChild(tr);
  }
  $('stats').textContent =
    `${r.dispatches} dispatches in ${r.submissions} submissions, ${r.pipelines} pipelines compiled.`;
}

// The live models: how each starts and steps, its default knobs and how often it evaluates
// (the CNN: held-out accuracy; the transformer: a sample of text).
const MODELS = {
  cnn: {
    start: (batch) => train_start(batch), step: train_step, batch: 64, steps: 60, every: 10,
    maxBatch: 512,
    about: 'A small CNN (conv 3x3, ReLU, max pool, linear) learns the 8x8 handwritten digits ' +
      'with the crate\'s layers, autograd, cross-entropy and Adam, one step at a time; the test ' +
      'accuracy is measured on 360 held-out images.',
  },
  char_transformer: {
    start: (batch, steps) => char_train_start(batch, steps), step: char_train_step,
    batch: 8, steps: 100, every: 25, maxBatch: 64,
    about: 'A decoder-only character transformer (token and positional embeddings, 2 pre-norm ' +
      'causal layers, 2 heads, width 64, context 32) learns the repository\'s own text with ' +
      'AdamW and a warm-up then cosine learning-rate schedule; the dashed line is the unigram ' +
      'entropy (a model that ignores context), and every 25 steps it writes a short sample.',
  },
};

function currentModel() {
  return MODELS[$('model').value] ? $('model').value : 'cnn';
}

// The loss (blue line), test accuracy (green dots, right axis 0..1) and unigram entropy
// (dashed) per step.
function draw(points, steps) {
  const c = $('chart');
  const ctx = c.getContext('2d');
  const w = c.width, h = c.height, pad = 28;
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = '#555';
  ctx.font = '12px system-ui, sans-serif';
  if (!points.length) return;
  const maxLoss = Math.max(...points.map((p) => p.loss), 0.1);
  const x = (s) => pad + (w - 2 * pad) * (s / Math.max(steps, 1));
  const y = (v, top) => h - pad - (h - 2 * pad) * (v / top);
  ctx.strokeStyle = '#ccc';
  ctx.beginPath(); ctx.moveTo(pad, h - pad); ctx.lineTo(w - pad, h - pad); ctx.stroke();
  ctx.fillText(`loss (max ${maxLoss.toFixed(2)})`, pad, 14);
  if (points.some((p) => p.test_accuracy !== null)) ctx.fillText('accuracy', w - pad - 52, 14);
  const unigram = points[0].unigram;
  if (unigram !== undefined && unigram <= maxLoss) {
    ctx.strokeStyle = '#999';
    ctx.setLineDash([4, 4]);
    ctx.beginPath(); ctx.moveTo(pad, y(unigram, maxLoss)); ctx.lineTo(w - pad, y(unigram, maxLoss));
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillText('unigram entropy', w - pad - 100, y(unigram, maxLoss) - 4);
  }
  ctx.strokeStyle = '#2563eb';
  ctx.lineWidth = 2;
  ctx.beginPath();
  points.forEach((p, i) => (i ? ctx.lineTo : ctx.moveTo).call(ctx, x(p.step), y(p.loss, maxLoss)));
  ctx.stroke();
  ctx.fillStyle = '#16a34a';
  for (const p of points) {
    if (p.test_accuracy !== null) {
      ctx.beginPath(); ctx.arc(x(p.step), y(p.test_accuracy, 1), 3, 0, 7); ctx.fill();
    }
  }
}

function showRuntime(p) {
  $('runtime').textContent =
    `runtime: ${p.dispatches} dispatches, ${p.submissions} submissions, in flight ` +
    `${p.in_flight} of at most ${p.max_in_flight}, pool ${(p.pool_live_bytes / 1024).toFixed(0)} KiB ` +
    `live (peak ${(p.pool_peak_bytes / 1024).toFixed(0)} KiB), ${p.pipelines} pipelines compiled`;
}

// Trains the selected model for the knobs' steps; resolves to the report kept in
// window.trainReport.
async function train() {
  const name = currentModel();
  const m = MODELS[name];
  const batch = Math.max(1, Math.min(m.maxBatch, Number($('batch').value) || m.batch));
  const steps = Math.max(1, Math.min(2000, Number($('steps').value) || m.steps));
  $('again').disabled = true;
  $('model').disabled = true;
  $('sample').textContent = '';
  $('phase').textContent = 'training: building the model…';
  await m.start(batch, steps);
  const points = [];
  for (let s = 1; s <= steps; s++) {
    const p = JSON.parse(await m.step(s % m.every === 0 || s === steps));
    points.push(p);
    draw(points, steps);
    showRuntime(p);
    const acc = points.filter((q) => q.test_accuracy !== null).pop();
    $('train').textContent = `step ${p.step}/${steps} · loss ${p.loss.toFixed(3)} · ` +
      `${acc ? 'test accuracy ' + (100 * acc.test_accuracy).toFixed(1) + '% · ' : ''}` +
      `${p.unigram !== undefined ? 'unigram entropy ' + p.unigram.toFixed(3) + ' · ' : ''}` +
      `${p.step_ms.toFixed(0)} ms/step`;
    if (p.sample) $('sample').textContent = `sample after step ${p.step}: ${p.sample}`;
    $('phase').textContent = `training: step ${s} of ${steps}`;
  }
  const head = points.slice(0, 5), tail = points.slice(-5);
  const mean = (v) => v.reduce((a, p) => a + p.loss, 0) / v.length;
  const last = points[points.length - 1];
  const report = { model: name, batch, steps, first_loss: mean(head), last_loss: mean(tail),
    test_accuracy: last.test_accuracy, sample: points.filter((p) => p.sample).map((p) => p.sample).pop() ?? null,
    points };
  window.trainReport = report;
  $('phase').textContent = 'done';
  $('again').disabled = false;
  $('model').disabled = false;
  return report;
}

// Trains, then sets the result marker: pass when the op checks passed and the loss fell.
async function trainAndReport(checksPassed) {
  $('result').dataset.status = 'pending';
  $('result').textContent = 'training…';
  const t = await train();
  const learned = t.last_loss < t.first_loss;
  const ok = checksPassed && learned;
  finish(ok ? 'pass' : 'fail', ok ? 'correctness check passed · the model learned' :
    (checksPassed ? 'training did not lower the loss' : 'correctness check FAILED'));
}

// Switching models loads its default knobs and description.
$('model').onchange = () => {
  const m = MODELS[currentModel()];
  $('batch').value = m.batch;
  $('batch').max = m.maxBatch;
  $('steps').value = m.steps;
  $('about').textContent = m.about;
};
$('model').onchange();

try {
  if (!navigator.gpu) {
    throw new Error('this browser has no WebGPU (navigator.gpu is missing)');
  }
  $('phase').textContent = 'requesting a WebGPU adapter…';
  const gpuInfo = (await navigator.gpu.requestAdapter())?.info;
  $('phase').textContent = 'loading the wasm module…';
  await init();
  $('phase').textContent = 'running the ops and their CPU references…';
  const report = JSON.parse(await run_demo());
  report.adapter.web = gpuInfo ? { vendor: gpuInfo.vendor, architecture: gpuInfo.architecture } : null;
  window.demoReport = report;
  render(report, gpuInfo);
  await trainAndReport(report.pass);
  $('again').onclick = () => trainAndReport(report.pass).catch((e) => finish('error', `error: ${e}`));
} catch (e) {
  window.demoError = String(e);
  const noGpu = !navigator.gpu || /adapter|webgpu|not compiled in/i.test(String(e));
  if (noGpu) {
    // wgpu's own message lists the backends it was built without: say what to do instead.
    finish('error', 'WebGPU is not available in this browser');
    $('help').dataset.show = '';
    $('help').innerHTML = 'This page needs WebGPU: Chrome or Edge 113+, Safari 18+ or ' +
      'Firefox 141+ (Windows). On Linux, start Chrome with <code>--enable-unsafe-webgpu ' +
      '--enable-features=Vulkan</code>; <code>chrome://gpu</code> shows whether WebGPU is ' +
      'enabled and which adapter it uses.';
    console.warn(e);
  } else {
    finish('error', `error: ${e}`);
    console.error(e);
  }
}
