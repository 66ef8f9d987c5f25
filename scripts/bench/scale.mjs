// Scale scenarios of the benchmark (`scripts/manage.sh bench --scale`, `--storm`), dispatched
// to from scripts/bench.mjs: relay nodes on one Redis, tabs spread over them by several
// generator processes (`loadgen --control`, each with its own loopback source address).
//
//   --scale [--scale-tabs 10000,50000,100000] [--nodes 6] [--call-secs 20] [--call-rate 1000]
//   --storm [--storm-tabs 19000] [--storm-others 30000] [--nodes 6] [--storm-secs 40]
//   [--redis one|cluster|one,cluster]: one Redis server (default), a Redis Cluster of three
//   primaries, or both in turn with the same rows
//
// Scale, at each size: a cold start of all tabs at once (binds/s); each node's resident memory
// per tab; Redis `used_memory` per tab; awaited calls to random tabs at a fixed rate while all are
// held (p50/p99, misrouted, relay CPU per call, Redis commands per call); then a few seconds of the
// same calls with Redis's MONITOR feed on, for the round trips per call (commands the nodes sent,
// not those run inside scripts) and the key events each node heard; idle, each node's CPU and
// commands per second; the store's own publish latency, no relay involved (scripts/bench/bus.mjs),
// on a Cluster also from one primary to a subscriber on another.
// Storm: one node holds --storm-tabs tabs, the others --storm-others between them; after 15 s of
// quiet calls the first node is killed (SIGKILL) a quarter into --storm-secs of calls; its tabs
// reconnect to the others with the browser client's backoff. Reported: time until all are bound
// again, binds per second, what became of the calls to those tabs, the other tabs' latency against
// the quiet figure, relay CPU and Redis operations per second each second.
//
// Results go to .run/bench/scale-<timestamp>.json.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { percentiles, sumErrors } from './procs.mjs';
import { scaleRun, stormRun } from './runs.mjs';

const fmt = (v) => (v == null ? 'n/a' : typeof v === 'number' ? v.toLocaleString('en-US') : String(v));

export async function main(argv, { root, target }) {
  const opt = (name, dflt) => { const i = argv.indexOf(name); return i >= 0 ? argv[i + 1] : dflt; };
  const nodes = Number(opt('--nodes', 6));
  const ctx = { root, target };
  const out = { machine: { cpus: cpus().length, model: cpus()[0]?.model, mem_gib: Math.round(totalmem() / 2 ** 30) }, started: new Date().toISOString(), scale: [], storm: null };
  const file = join(root, '.run/bench', `scale-${out.started.replace(/[:.]/g, '-')}.json`);
  const save = () => { mkdirSync(join(root, '.run/bench'), { recursive: true }); writeFileSync(file, JSON.stringify(out, null, 2)); };
  const kinds = opt('--redis', 'one').split(',');
  const on = (kind) => (kind === 'cluster' ? 'a Redis Cluster of 3 primaries' : 'one Redis server');
  if (argv.includes('--scale')) {
    for (const kind of kinds) for (const tabs of opt('--scale-tabs', '10000,50000,100000').split(',').map(Number)) {
      const r = await scaleRun(ctx, tabs, nodes, Number(opt('--call-secs', 20)), Number(opt('--call-rate', 1000)), kind);
      r.redis = kind;
      out.scale.push(r);
      save();
      const c = r.calls;
      console.log(`\n${fmt(tabs)} tabs on ${nodes} nodes, ${on(kind)} (${r.generators} generators), load average ${r.loadavg_1m_at_bind} at bind, ${c.loadavg_1m} after calls`);
      console.log(`  cold start: ${fmt(r.bind.bound)} bound in ${fmt(r.bind.ms)} ms = ${fmt(r.bind.per_s)} tabs/s, ${r.bind.failures} failed${r.bind.first_failure ? ` (${r.bind.first_failure})` : ''}; each tab from connect to bound p50/p99/max ${r.bind.tab_bind_ms.p50}/${r.bind.tab_bind_ms.p99}/${r.bind.tab_bind_ms.max} ms (${r.bind.tab_bind_ms.over_1s} over 1 s); Redis commands per bind ${r.bind.redis_commands_per_bind}; key events each node heard meanwhile ${fmt(r.bind.key_events_heard_per_node)}; accept-queue overflows ${r.bind.listen_overflows} (connections the kernel dropped while a listener was full, retried by the client's SYN)`);
      console.log(`  relay RSS per tab by node: ${r.nodes_rss.map((n) => fmt(n.rss_bytes_per_tab)).join(' / ')} B (RSS with tabs ${r.nodes_rss.map((n) => fmt(Math.round(n.rss_kib_with_tabs / 1024))).join(' / ')} MiB)`);
      console.log(`  Redis used_memory: ${fmt(r.redis_used_memory.before)} B before, ${fmt(r.redis_used_memory.bound)} B bound = ${fmt(r.redis_used_memory.bytes_per_tab)} B per tab`);
      const l = percentiles([c.quiet, c.others, c.caught, c.back].map((g) => g.hist ?? []));
      const groups = [c.quiet, c.others, c.caught, c.back];
      console.log(`  calls at ${fmt(c.rate)}/s for ${c.secs} s: ${fmt(c.sent)} sent, ${fmt(groups.reduce((a, g) => a + g.ok, 0))} ok, errors ${JSON.stringify(sumErrors(groups.map((g) => g.errors)))}, skipped ${c.skipped}; p50 ${fmt(l?.p50)} µs, p99 ${fmt(l?.p99)} µs, p99.9 ${fmt(l?.p999)} µs; misrouted ${c.misrouted}, duplicated ${c.duplicated}`);
      console.log(`  tabs that lost their connection during the run: ${r.tabs_lost_meanwhile} (bound again: ${r.tabs_bound_again}); calls after the first such loss are in the raw results' others/caught/back groups`);
      console.log(`  idle (all tabs held, no calls): relay CPU ${fmt(r.idle.relay_cpu_ms_per_s)} ms/s (all nodes), Redis ${fmt(r.idle.redis_commands_per_s)} commands/s (inside scripts included)`);
      console.log(`  idle, per node: relay CPU ${r.idle.per_node.map((n) => fmt(n.relay_cpu_ms_per_s)).join(' / ')} ms/s; Redis commands sent ${r.idle.per_node.map((n) => fmt(n.redis_commands_per_s)).join(' / ')} /s; key events heard ${fmt(r.idle.key_events_heard_per_node_per_s)} /s per node`);
      console.log(`  relay CPU per call ${fmt(c.relay_cpu_us_per_call)} µs (all nodes; ${fmt(c.relay_cpu_us_per_call_above_idle)} µs above idle), Redis ${fmt(c.redis_commands_per_call)} commands per call, inside scripts included (${fmt(c.redis_commands_per_call_above_idle)} above idle), Redis CPU ${fmt(c.redis_cpu_ms)} ms over the phase`);
      const sp = r.store_publish;
      const lat = (x) => `p50 ${fmt(x.p50_us)} µs, p99 ${fmt(x.p99_us)} µs, max ${fmt(x.max_us)} µs (${fmt(x.received)} of ${fmt(x.sent)} received${x.error ? `; ended early: ${x.error}` : ''})`;
      console.log(`  the store alone, no relay: a PUBLISH at ${fmt(sp.same_server.rate)}/s to a subscriber on the same server ${lat(sp.same_server)}${sp.across_cluster_bus ? `; from one primary to a subscriber on another (across the cluster bus, as a call to a tab on another node) ${lat(sp.across_cluster_bus)}` : ''}`);
      console.log(`  with MONITOR on (${fmt(c.watched.ok)} calls): Redis round trips per call ${fmt(c.round_trips_per_call)} (all nodes, idle subtracted); key events heard per node per call ${fmt(c.key_events_heard_per_node_per_call)}`);
    }
  }
  if (argv.includes('--storm')) for (const kind of kinds) {
    const r = await stormRun(ctx, Number(opt('--storm-tabs', 19000)), Number(opt('--storm-others', 30000)), nodes, Number(opt('--storm-secs', 40)), Number(opt('--call-rate', 1000)), kind);
    r.redis = kind;
    out.storm = [...(out.storm ?? []), r];
    save();
    const q = r.quiet.quiet.latency_us;
    const s = r.storm;
    console.log(`\nlost node, ${on(kind)}: ${fmt(r.storm_tabs)} tabs on the killed node, ${fmt(r.other_tabs)} on ${r.nodes - 1} others (${r.generators} generators)`);
    const p = r.per_rebind;
    if (p) console.log(`  per re-bind (kill to last re-bind + 1 s, ${p.window_s} s; above the same calls before the kill): relay CPU ${fmt(p.relay_cpu_us)} µs (surviving nodes), Redis ${fmt(p.redis_commands)} commands (inside scripts included); calls to the other tabs that failed: ${p.other_tabs_failed_calls}; key events each surviving node heard over the whole storm: ${p.key_events_heard_per_node ?? 'not counted by this build'}`);
    console.log(`  quiet calls: p50 ${fmt(q?.p50)} µs, p99 ${fmt(q?.p99)} µs (${fmt(r.quiet.quiet.ok)} ok)`);
    console.log(`  tabs lost ${fmt(r.drops)}, bound again ${fmt(r.rebinds)}, still away ${r.still_away}; all bound again ${fmt(r.all_bound_again_ms)} ms after the kill; away p50/p99/max ${fmt(r.away_ms_p50_max)}/${fmt(r.away_ms_p99_max)}/${fmt(r.away_ms_max)} ms`);
    console.log(`  reconnect attempts ${fmt(r.attempts)}, failed ${JSON.stringify(r.failed_attempts)}`);
    console.log(`  binds again per second after the kill: ${r.rebinds_per_s_after_kill.join(' ')}`);
    console.log(`  calls to a lost tab in flight at the loss or sent while it was away: ${fmt(s.caught.ok)} ok, errors ${JSON.stringify(s.caught.errors)}, p50 ${fmt(s.caught.latency_us?.p50)} µs, p99 ${fmt(s.caught.latency_us?.p99)} µs, max ${fmt(s.caught.latency_us?.max)} µs`);
    console.log(`  calls to a lost tab once bound again: ${fmt(s.back.ok)} ok, errors ${JSON.stringify(s.back.errors)}, p50 ${fmt(s.back.latency_us?.p50)} µs, p99 ${fmt(s.back.latency_us?.p99)} µs`);
    console.log(`  calls to the other tabs after the kill: ${fmt(s.others.ok)} ok, errors ${JSON.stringify(s.others.errors)}, p50 ${fmt(s.others.latency_us?.p50)} µs, p99 ${fmt(s.others.latency_us?.p99)} µs (${s.others.latency_us && q ? (s.others.latency_us.p99 / q.p99).toFixed(1) : 'n/a'}× quiet)`);
    console.log(`  Redis commands from the kill to the end of the calls, most first: ${Object.entries(r.redis_commands_after_kill).map(([k, n]) => `${k} ${fmt(n)}`).join(', ')}`);
    console.log(`  misrouted ${s.misrouted}, delivered twice ${s.duplicated} (the browser client answers those from its memory of given answers), skipped ${s.skipped}; relay CPU (surviving nodes) ${fmt(s.relay_cpu_ms)} ms, Redis ${fmt(s.redis_commands)} commands over the ${s.secs} s`);
    console.log('  each second (t from the start of the calls): relay CPU % / Redis CPU % / Redis ops/s / load');
    for (const x of r.samples) console.log(`    ${(x.t_ms / 1000).toFixed(0).padStart(3)} s  ${String(x.relay_cpu_pct).padStart(4)}  ${String(x.redis_cpu_pct).padStart(4)}  ${String(x.redis_ops_per_s).padStart(7)}  ${x.loadavg_1m}`);
  }
  console.log(`\nload average now ${loadavg().map((x) => x.toFixed(2)).join(' ')}; raw results: ${file}`);
}
