// Loads the wasm-bindgen output (web/pkg, built by web/build.sh), runs the demo workload and
// renders its report. The result marker is #result[data-status] (pending, pass, fail, error);
// the full report is also left in window.demoReport for tests.
import init, { run_demo } from './pkg/web_demo.js';

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
    const cells = [s.name, `[${s.shape.join(', ')}]`, s.first_ms.toFixed(2), s.median_ms.toFixed(2),
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

try {
  if (!navigator.gpu) {
    throw new Error('this browser has no WebGPU (navigator.gpu is missing)');
  }
  const gpuInfo = (await navigator.gpu.requestAdapter())?.info;
  await init();
  const report = JSON.parse(await run_demo());
  report.adapter.web = gpuInfo ? { vendor: gpuInfo.vendor, architecture: gpuInfo.architecture } : null;
  window.demoReport = report;
  render(report, gpuInfo);
  finish(report.pass ? 'pass' : 'fail',
    report.pass ? 'correctness check passed' : 'correctness check FAILED');
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
