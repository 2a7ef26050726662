// Adoption: learning what the pinned data plane serves (the revision recorded in the node's local state, read from
// the local Git cache, validated and rendered as always) without writing to it. At start, before any fetch, so
// health checks, the health re-render, the neighbour refresh, drift checks and BGP work while the Git server is
// unreachable; and after a restart while the branch moved on, so status, drift checks and the rollback policy know
// the last good revision even if the new head fails. docs/reconciler.md, "Restart and adoption".
import { parseConfig } from '../../render/config/index.js';
import { renderDesiredState } from '../../render/desired.js';
import { readRevisionFiles } from '../source/git-objects.js';
import { errorText, type NodeState } from './node-state.js';
import { errorCode } from '../../errors.js';

/** Adopts `revision` as what the pinned data plane serves; returns why it cannot, or null. */
export async function adoptPinned(s: NodeState, revision: string): Promise<string | null> {
  const { remote, configPath, node } = s.o;
  let files;
  try {
    files = await readRevisionFiles(remote.gitdir, revision, configPath);
  } catch (err) {
    return errorCode(err) === 'GitObjectMissing'
      ? `revision ${revision.slice(0, 12)} is not in the Git cache (${remote.gitdir})`
      : `reading ${revision.slice(0, 12)} from the Git cache (${remote.gitdir}) failed: ${errorText(err)}`;
  }
  try {
    const parsed = parseConfig(files);
    if (!parsed.model) return `revision ${revision.slice(0, 12)} no longer validates`;
    if (!parsed.model.nodes.some((n) => n.metadata.name === node)) return `revision ${revision.slice(0, 12)} does not name node '${node}'`;
    const desired = renderDesiredState(parsed.model, node, s.o.health?.());
    await s.dpLock.run(async () => {
      s.appliedModel = parsed.model!;
      s.liveModel = parsed.model!;
      s.appliedDesired = desired;
      await s.refreshServices(desired);
    });
    s.notifyApplied(parsed.model);
    return null;
  } catch (err) {
    return `adopting ${revision.slice(0, 12)} failed: ${errorText(err)}`;
  }
}

/**
 * At start, before any fetch: learn what the pinned data plane serves from the revision recorded as applied,
 * read from the local Git cache (`<cache-dir>/git`), validated as adoption always is. Health checks, the health
 * re-render, the neighbour refresh, drift checks and BGP then work from it while the Git server is unreachable
 * ("packets and health never wait for Git"). Writes nothing to the data plane; the first reconcile after a
 * successful fetch still runs the full pipeline (with nothing to write when nothing changed).
 */
export async function adoptAtStart(s: NodeState): Promise<{ adopted: string | null; problem: string | null }> {
  const revision = s.applied;
  if (!revision || s.appliedDesired || s.decommissioned) return { adopted: null, problem: null };
  const problem = await adoptPinned(s, revision);
  if (problem) {
    const line = `cannot adopt the pinned revision at start: ${problem}; health checks, neighbour refresh and drift checks wait for the first successful fetch`;
    s.warnings.push(line);
    s.log.warn(line, { revision, stage: 'adopt', reason: problem });
    return { adopted: null, problem };
  }
  const d = s.appliedDesired!;
  s.log.info(`adopted ${revision.slice(0, 12)} from the local Git cache before fetching: ${d.services.length} services, ${d.reals.length} reals; health checks and neighbour refresh run from it`,
    { revision, stage: 'adopt', services: d.services.length, reals: d.reals.length });
  return { adopted: revision, problem: null };
}
