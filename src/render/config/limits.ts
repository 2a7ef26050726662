// Hard limits of the config stage. They keep hostile or broken repositories from costing the
// reconciler more than a bounded amount of time and memory; each is documented in docs/config.md.
export const LIMITS = {
  /** Bytes per file; bigger files are refused without being parsed. */
  maxFileBytes: 1024 * 1024,
  /** Bytes over all files of one revision. */
  maxTotalBytes: 8 * 1024 * 1024,
  /** YAML files per revision. */
  maxFiles: 1000,
  /** Documents per file and per revision. */
  maxDocumentsPerFile: 1000,
  maxDocuments: 10000,
  /**
   * Real entries over all services of a revision: bounds the work per real after parsing (identities, tables). Not
   * the data plane's capacity: a real listed by many services is one entry of lb_reals, and capacity.ts counts the
   * distinct reals of each lb node against it. 1,000 services x 100 reals fit; 30 services of 4096 reals are the
   * most. Every real takes two YAML entries at the least, so the entries bound below admits 131,072 of them at most:
   * this count stays the binding one for reals, and the exact count after parsing stays reachable.
   */
  maxTotalReals: 30 * 4096,
  /**
   * YAML collection entries over all files of a revision, counted before parsing (prescan.ts): what bounds the
   * memory and time of parsing. A revision of 65,536 reals with weights and states needs about 200,000.
   */
  maxYamlEntries: 262144,
  /** Nesting of YAML collections (maps and sequences), counted from the document root. */
  maxDepth: 32,
  /** Diagnostics reported per file before the rest of that file is skipped. */
  maxDiagnosticsPerFile: 100,
  maxServices: 4096,
  maxNodes: 1024,
  /** Listed in the schemas as maxItems; repeated here so code and docs can refer to them. */
  maxRealsPerService: 4096,
  maxPortsPerService: 64,
  /** Service spec.sourceRanges entries (docs/config.md); an lb node's total is DATAPLANE_LIMITS.lbSourceRanges. */
  maxSourceRangesPerService: 1024,
  maxAllowedVipsPerNode: 256,
  maxAddressesPerNode: 64,
} as const;

export const DEFAULTS = {
  tableSize: 16381,
  seed: 'JLfvgnHc2kaSUFaI',
  conntrackMaxEntries: 65536,
  statusBranch: 'gitlb-status',
  rollbackPolicy: 'manual',
  weight: 100,
  mtu: 1500,
  healthCheck: { type: 'none', interval: '2s', timeout: '1s', rise: 2, fall: 3, httpPath: '/' },
} as const;

/** Real weights are integers in this range; 0 is refused (use state: disabled). */
export const WEIGHT_MIN = 1;
export const WEIGHT_MAX = 65535;

/** Fixed map sizes of one lb node's data plane (src/bpf/include/lb_consts.h LB_MAX_*); checked at validate. */
export const DATAPLANE_LIMITS = {
  lbServices: 1024,
  /** Listeners plus one address marker per VIP address. */
  lbVipEntries: 4096,
  lbReals: 65536,
  /** IPv4 outer sources of dsr-ipip in lb_config (LB_MAX_SRC4): an lb node's IPv4 spec.addresses. */
  lbSrc4: 8,
  /** Service sourceRanges entries over every service one lb node serves. lb_source_ranges (LB_MAX_SOURCE_RANGES)
   * holds twice as many, so the old and the new entries of any transition fit side by side (the plan adds the new
   * prefixes before it removes the old ones: docs/datapath.md "Source ranges"). */
  lbSourceRanges: 16384,
  /** Entries of lb_source_ranges (LB_MAX_SOURCE_RANGES): twice lbSourceRanges. */
  lbSourceRangeEntries: 32768,
  /** QUIC server ids (spec.reals[].serverId of services with spec.quic.connectionIdRouting) over every service one lb
   * node serves: lb_quic_servers (LB_MAX_QUIC_SERVERS). The plan deletes before it adds there, so a transition needs
   * room for the bigger revision only (docs/datapath.md "QUIC connection IDs"). */
  lbQuicServers: 65536,
} as const;
