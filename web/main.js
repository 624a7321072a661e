// Loads the wasm-bindgen output (web/pkg, built by web/build.sh), runs the demo workload and
// renders its report. The result marker is #result[data-status] (pending, pass, fail, error);
// the full report is also left in window.demoReport for tests.
import init, { run_demo, train_start, train_step } from './pkg/web_demo.js';

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

// The loss (blue line) and test accuracy (green dots, right axis 0..1) per step.
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
  ctx.fillText('accuracy', w - pad - 52, 14);
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

// Trains for the knobs' steps; resolves to the report kept in window.trainReport.
async function train() {
  const batch = Math.max(1, Math.min(512, Number($('batch').value) || 64));
  const steps = Math.max(1, Math.min(2000, Number($('steps').value) || 60));
  $('again').disabled = true;
  $('phase').textContent = 'training: building the model…';
  await train_start(batch);
  const points = [];
  for (let s = 1; s <= steps; s++) {
    const p = JSON.parse(await train_step(s % 10 === 0 || s === steps));
    points.push(p);
    draw(points, steps);
    showRuntime(p);
    const acc = points.filter((q) => q.test_accuracy !== null).pop();
    $('train').textContent = `step ${p.step}/${steps} · loss ${p.loss.toFixed(3)} · ` +
      `${acc ? 'test accuracy ' + (100 * acc.test_accuracy).toFixed(1) + '% · ' : ''}` +
      `${p.step_ms.toFixed(0)} ms/step`;
    $('phase').textContent = `training: step ${s} of ${steps}`;
  }
  const head = points.slice(0, 5), tail = points.slice(-5);
  const mean = (v) => v.reduce((a, p) => a + p.loss, 0) / v.length;
  const report = { batch, steps, first_loss: mean(head), last_loss: mean(tail),
    test_accuracy: points[points.length - 1].test_accuracy, points };
  window.trainReport = report;
  $('phase').textContent = 'done';
  $('again').disabled = false;
  return report;
}

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
  const t = await train();
  const learned = t.last_loss < t.first_loss;
  const ok = report.pass && learned;
  finish(ok ? 'pass' : 'fail', ok ? 'correctness check passed · the model learned' :
    (report.pass ? 'training did not lower the loss' : 'correctness check FAILED'));
  $('again').onclick = () => train().catch((e) => finish('error', `error: ${e}`));
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
