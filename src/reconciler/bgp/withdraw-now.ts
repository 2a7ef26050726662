// Withdrawing every VIP of a node by BGP from outside its daemon (`gitlb down`): BIRD keeps announcing what the
// daemon last wrote, so taking the data plane away without this leaves the router sending traffic to the node.
// It is the daemon's own --withdraw-on-exit path (BgpAnnouncer.withdrawAll): same file, same reload, same checks.
import { BgpAnnouncer } from './announcer.js';
import { bgpNode } from '../../render/bgp/bird.js';
import { renderDesiredState } from '../../render/desired.js';
import type { ConfigModel } from '../../render/model.js';

export interface WithdrawNowOptions {
  node: string;
  /** The config the node served (its VIPs and BGP sessions); the sessions stay up, every VIP is withdrawn. */
  model: ConfigModel;
  configFile: string;
  birdSocket: string;
  birdc?: string;
}

/** The VIPs now withdrawn (none when the node has no BGP settings: nothing is written, null). Throws when BIRD
 * was not told (file not written, birdc failed or BIRD refused the file). */
export async function withdrawAllNow(o: WithdrawNowOptions): Promise<string[] | null> {
  if (!bgpNode(o.model, o.node)) return null;
  const desired = renderDesiredState(o.model, o.node);
  const a = new BgpAnnouncer({
    node: o.node,
    configFile: o.configFile,
    birdSocket: o.birdSocket,
    birdc: o.birdc,
    applied: () => ({ model: o.model, desired }),
    // The data plane is being removed: it is not asked about (withdrawing does not depend on it).
    xdpAttached: async () => false,
  });
  await a.withdrawAll();
  const s = a.status();
  if (s.bird.error || !s.bird.reloadedAt)
    throw new Error(`BIRD was not told to withdraw ${o.node}'s VIPs (${o.configFile}, socket ${o.birdSocket}): ${s.bird.error ?? 'no reload'}; give the --bird-config and --bird-socket gitlb run had, or --bird-socket off`);
  return s.vips.map((v) => v.vip);
}
