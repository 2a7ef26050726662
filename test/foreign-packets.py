#!/usr/bin/python3
# Packets built by another project's protocol implementation (Debian's python3-scapy, installed by `make deps`)
# for the foreign-packet suite (test/netns/hostile-foreign.test.ts): scapy's own layers, field defaults, lengths and
# checksums, aimed at the test's VIPs, ports, SNAT address and backend addresses (and at addresses that are none
# of those), so they reach every path of xdp_lb and tc_backend. Nothing here checks anything: the test runs the
# frames through the real programs and judges the outputs with test/lib/hostile.ts.
# stdin: JSON addresses (see the test); stdout: JSON {"xdp"|"ingress"|"egress": [[name, hex], ...]}.
import json
import sys
from socket import inet_aton, inet_pton, AF_INET6

from scapy.config import conf
conf.verb = 0
from scapy.packet import Raw
from scapy.layers.l2 import Ether, Dot1Q, Dot1AD, ARP, GRE, LLC, SNAP, Dot3
from scapy.layers.inet import (IP, TCP, UDP, ICMP, IPOption, IPOption_RR, IPOption_Timestamp, IPOption_Router_Alert,
                               IPOption_LSRR, IPOption_NOP, IPOption_EOL, IPOption_SSRR, fragment)
from scapy.layers.inet6 import (IPv6, IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, IPv6ExtHdrFragment,
                                IPv6ExtHdrSegmentRouting, RouterAlert, Jumbo, PadN, HBHOptUnknown, fragment6,
                                ICMPv6EchoRequest, ICMPv6EchoReply, ICMPv6DestUnreach, ICMPv6PacketTooBig,
                                ICMPv6TimeExceeded, ICMPv6ParamProblem, ICMPv6ND_NS, ICMPv6ND_NA, ICMPv6ND_RS,
                                ICMPv6ND_RA, ICMPv6NDOptSrcLLAddr, ICMPv6NDOptPrefixInfo, ICMPv6NDOptMTU,
                                ICMPv6MLQuery, ICMPv6MLReport, ICMPv6MLQuery2, ICMPv6MLReport2, ICMPv6MLDMultAddrRec)
from scapy.layers.ipsec import AH, ESP
from scapy.layers.sctp import SCTP, SCTPChunkInit, SCTPChunkData
from scapy.layers.dns import DNS, DNSQR, DNSRR
from scapy.layers.vxlan import VXLAN
from scapy.layers.ppp import PPPoE, PPP
from scapy.contrib.mpls import MPLS
from scapy.contrib.geneve import GENEVE
from scapy.contrib.igmp import IGMP
from scapy.contrib.igmpv3 import IGMPv3, IGMPv3mq

A = json.load(sys.stdin)
out = {'xdp': [], 'ingress': [], 'egress': []}


def add(prog, name, pkt):
    out[prog].append([name, bytes(pkt).hex()])


TCP_ALL_OPTIONS = [('MSS', 1460), ('NOP', None), ('WScale', 7), ('SAckOK', b''), ('Timestamp', (123456, 0)),
                   ('SAck', (1000, 2000)), ('TFO', b'\x01\x02\x03\x04\x05\x06\x07\x08'), ('UTO', 300),
                   ('AltChkSum', (0, 0)), ('MD5', b'\x00' * 16), ('EOL', None)]


def l4_set(family, dst, sport, tcp_port, udp_port, peer):
    """Transport variety from `peer` (the sender) to dst: (name, layers over IP)."""
    icmp_err = ICMP if family == 4 else None
    inner_ip = (lambda s, d: IP(src=s, dst=d)) if family == 4 else (lambda s, d: IPv6(src=s, dst=d))
    big = Raw(b'\x61' * (1500 - (20 if family == 4 else 40) - 20))
    s = [
        ('TCP SYN defaults', TCP(dport=tcp_port)),
        ('TCP SYN every option', TCP(sport=sport, dport=tcp_port, flags='S', options=TCP_ALL_OPTIONS)),
        ('TCP SYN+ECE+CWR', TCP(sport=sport + 1, dport=tcp_port, flags='SEC', options=[('MSS', 1220)])),
        ('TCP ACK data', TCP(sport=sport, dport=tcp_port, flags='PA', seq=1, ack=1) / Raw(b'GET / HTTP/1.1\r\nHost: x\r\n\r\n')),
        ('TCP FIN+URG', TCP(sport=sport, dport=tcp_port, flags='FAU', urgptr=3) / Raw(b'bye')),
        ('TCP RST', TCP(sport=sport, dport=tcp_port, flags='R')),
        ('TCP SYN to another port', TCP(sport=sport, dport=tcp_port + 363)),
        ('TCP full-size segment', TCP(sport=sport, dport=tcp_port, flags='A') / big),
        ('TCP segment over the MTU', TCP(sport=sport, dport=tcp_port, flags='PA') / Raw(b'\x62' * 1900)),
        ('UDP DNS query', UDP(sport=sport, dport=udp_port) / DNS(rd=1, qd=DNSQR(qname='www.example.org', qtype='AAAA'))),
        ('UDP zero checksum', UDP(sport=sport, dport=udp_port, chksum=0) / Raw(b'zero')),
        ('UDP empty', UDP(sport=sport, dport=udp_port)),
        ('UDP full-size datagram', UDP(sport=sport, dport=udp_port) / Raw(b'\x63' * (1500 - (20 if family == 4 else 40) - 8))),
        ('UDP to another port', UDP(sport=sport, dport=udp_port + 70) / Raw(b'x')),
        ('SCTP INIT', SCTP(sport=sport, dport=tcp_port) / SCTPChunkInit(init_tag=1, n_in_streams=1, n_out_streams=1)),
        ('SCTP DATA', SCTP(sport=sport, dport=tcp_port, tag=7) / SCTPChunkData(data=b'payload')),
        ('GRE carrying IPv4 TCP', GRE() / IP(src=peer if family == 4 else '192.0.2.7', dst='198.51.100.77') / TCP(dport=tcp_port)),
        ('ESP', ESP(spi=0x100, seq=1, data=b'\x00' * 24)),
    ]
    if family == 4:
        s += [
            ('AH over TCP', AH(spi=0x200, seq=1, nh=6, icv=b'\x00' * 12) / TCP(sport=sport, dport=tcp_port)),
            ('IP-in-IP', IP(src='192.0.2.9', dst=dst) / TCP(sport=sport, dport=tcp_port)),
            ('ICMP echo', ICMP(id=7, seq=1) / Raw(b'ping')),
            ('ICMP frag needed quoting TCP', ICMP(type=3, code=4, nexthopmtu=1280) / inner_ip(dst, peer) / TCP(sport=tcp_port, dport=sport, flags='SA')),
            ('ICMP port unreachable quoting UDP', ICMP(type=3, code=3) / inner_ip(dst, peer) / UDP(sport=udp_port, dport=sport) / Raw(b'q')),
            ('ICMP time exceeded quoting ICMP', ICMP(type=11, code=0) / inner_ip(dst, peer) / ICMP(id=1)),
            ('ICMP parameter problem quoting TCP options', ICMP(type=12, code=0, ptr=20) / inner_ip(dst, peer) / TCP(sport=tcp_port, dport=sport, options=TCP_ALL_OPTIONS)),
            ('ICMP redirect', ICMP(type=5, code=1, gw='198.51.100.254') / inner_ip(peer, dst) / TCP(sport=sport, dport=tcp_port)),
            ('IGMPv2 report', IGMP(type=0x16, gaddr='239.1.2.3')),
            ('IGMPv3 query', IGMPv3(type=0x11) / IGMPv3mq()),
            ('UDP VXLAN', UDP(sport=sport, dport=4789) / VXLAN(vni=42) / Ether(src='02:00:00:00:00:05', dst='02:00:00:00:00:06') / IP(src='192.0.2.5', dst=dst) / TCP(dport=tcp_port)),
            ('UDP GENEVE', UDP(sport=sport, dport=6081) / GENEVE(vni=43, proto=0x6558) / Ether(src='02:00:00:00:00:05', dst='02:00:00:00:00:06') / IP(src='192.0.2.5', dst=dst) / UDP(dport=udp_port)),
        ]
    else:
        s += [
            ('AH over TCP', AH(spi=0x200, seq=1, nh=6, icv=b'\x00' * 12) / TCP(sport=sport, dport=tcp_port)),
            ('IPv6-in-IPv6', IPv6(src='2001:db8:c::9', dst=dst) / TCP(sport=sport, dport=tcp_port)),
            ('ICMPv6 echo', ICMPv6EchoRequest(id=7, seq=1, data=b'ping')),
            ('ICMPv6 echo reply', ICMPv6EchoReply(id=7, seq=1)),
            ('ICMPv6 too big quoting TCP', ICMPv6PacketTooBig(mtu=1280) / inner_ip(dst, peer) / TCP(sport=tcp_port, dport=sport, flags='SA')),
            ('ICMPv6 unreachable quoting UDP', ICMPv6DestUnreach(code=4) / inner_ip(dst, peer) / UDP(sport=udp_port, dport=sport) / Raw(b'q')),
            ('ICMPv6 time exceeded quoting ICMPv6', ICMPv6TimeExceeded() / inner_ip(dst, peer) / ICMPv6EchoRequest()),
            ('ICMPv6 parameter problem quoting an extension chain', ICMPv6ParamProblem(ptr=40) / inner_ip(dst, peer) / IPv6ExtHdrHopByHop() / TCP(sport=tcp_port, dport=sport)),
            ('ND neighbour solicitation', ICMPv6ND_NS(tgt=dst) / ICMPv6NDOptSrcLLAddr(lladdr='02:00:00:00:00:c1')),
            ('ND neighbour advertisement', ICMPv6ND_NA(tgt=peer, R=0, S=1, O=1)),
            ('ND router solicitation', ICMPv6ND_RS()),
            ('ND router advertisement', ICMPv6ND_RA() / ICMPv6NDOptPrefixInfo(prefix='2001:db8:9::', prefixlen=64) / ICMPv6NDOptMTU(mtu=1500)),
            ('MLD query', ICMPv6MLQuery()),
            ('MLDv2 report', ICMPv6MLReport2(records=[ICMPv6MLDMultAddrRec(dst='ff05::1:3')])),
            ('UDP VXLAN', UDP(sport=sport, dport=4789) / VXLAN(vni=42) / Ether(src='02:00:00:00:00:05', dst='02:00:00:00:00:06') / IPv6(src='2001:db8:c::5', dst=dst) / TCP(dport=tcp_port)),
        ]
    return s


def ip_variants4(src, dst):
    return [
        ('', lambda: IP(src=src, dst=dst)),
        ('IPv4 options RR ', lambda: IP(src=src, dst=dst, options=[IPOption_RR(routers=['0.0.0.0'] * 3)])),
        ('IPv4 options timestamp ', lambda: IP(src=src, dst=dst, options=[IPOption_Timestamp(flg=0, timestamp=[0, 0])])),
        ('IPv4 router alert ', lambda: IP(src=src, dst=dst, options=[IPOption_Router_Alert()])),
        ('IPv4 LSRR ', lambda: IP(src=src, dst=dst, options=[IPOption_LSRR(routers=['198.51.100.254'])])),
        ('IPv4 SSRR ', lambda: IP(src=src, dst=dst, options=[IPOption_SSRR(routers=['198.51.100.254', dst])])),
        ('IPv4 NOP+EOL ', lambda: IP(src=src, dst=dst, options=[IPOption_NOP(), IPOption_NOP(), IPOption_NOP(), IPOption_EOL()])),
        ('IPv4 40 bytes of options ', lambda: IP(src=src, dst=dst, options=[IPOption_RR(routers=['0.0.0.0'] * 9)])),
        ('IPv4 DF ECN TOS ', lambda: IP(src=src, dst=dst, flags='DF', tos=0xb9, ttl=1, id=0)),
    ]


def ip_variants6(src, dst):
    return [
        ('', lambda: IPv6(src=src, dst=dst)),
        ('flow label TC ', lambda: IPv6(src=src, dst=dst, tc=0xb9, fl=0xabcde, hlim=1)),
        ('hop-by-hop ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrHopByHop(options=[RouterAlert(), PadN(optdata=b'\x00\x00')])),
        ('destination options ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1e, optdata=b'\x01\x02')])),
        ('routing type 0 ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrRouting(addresses=['2001:db8:9::1', '2001:db8:9::2'])),
        ('segment routing ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrSegmentRouting(addresses=[dst, '2001:db8:9::1'], segleft=1)),
        ('hop-by-hop, routing, destination options ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrHopByHop() / IPv6ExtHdrRouting(addresses=[dst], segleft=0) / IPv6ExtHdrDestOpt()),
        ('atomic fragment ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrFragment(id=5, m=0, offset=0)),
        ('hop-by-hop then fragment header ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrHopByHop() / IPv6ExtHdrFragment(id=6)),
        ('destination options then AH ', lambda: IPv6(src=src, dst=dst) / IPv6ExtHdrDestOpt() / AH(spi=1, seq=1, icv=b'\x00' * 12)),
    ]


def l2_variants(src_mac, dst_mac):
    return [
        ('', lambda: Ether(src=src_mac, dst=dst_mac)),
        ('802.1Q ', lambda: Ether(src=src_mac, dst=dst_mac) / Dot1Q(vlan=5, prio=3)),
        ('QinQ 802.1ad ', lambda: Ether(src=src_mac, dst=dst_mac) / Dot1AD(vlan=100) / Dot1Q(vlan=5)),
        ('double 802.1Q ', lambda: Ether(src=src_mac, dst=dst_mac) / Dot1Q(vlan=100) / Dot1Q(vlan=5)),
        ('802.1Q priority tag ', lambda: Ether(src=src_mac, dst=dst_mac) / Dot1Q(vlan=0, prio=5)),
        ('MPLS ', lambda: Ether(src=src_mac, dst=dst_mac) / MPLS(label=16, s=1, ttl=64)),
        ('PPPoE ', lambda: Ether(src=src_mac, dst=dst_mac) / PPPoE(sessionid=0x11) / PPP()),
    ]


def family_corpus(prog, family, peer, targets, src_mac, dst_mac, sport, tcp_port, udp_port, variants_for):
    """Every transport over the plain header to every target; the core transports under every IP and L2
    variant; everything fragmented."""
    # scapy builds a few hundred frames a second: the variants go where they matter (the core transports and
    # the ICMP errors, under every IP variant; the core ones under every L2 variant), not to every combination
    core = {'TCP SYN every option', 'UDP DNS query'}
    for n, (tname, dst) in enumerate(targets):
        ipv = ip_variants4(peer, dst) if family == 4 else ip_variants6(peer, dst)
        for lname, l4 in l4_set(family, dst, sport, tcp_port, udp_port, peer):
            add(prog, f'{tname}: {lname}', Ether(src=src_mac, dst=dst_mac) / ipv[0][1]() / l4)
            if n >= variants_for:
                continue
            if lname in core or (lname.startswith('ICMP') and 'echo' not in lname):
                for vname, ip in ipv[1:]:
                    add(prog, f'{tname}: {vname}{lname}', Ether(src=src_mac, dst=dst_mac) / ip() / l4)
            if lname in core:
                for vname, l2 in l2_variants(src_mac, dst_mac)[1:]:
                    add(prog, f'{tname}: {vname}{lname}', l2() / ipv[0][1]() / l4)
        # fragments (first, middle, last) of a datagram and of a segment
        for lname, l4 in [('UDP', UDP(sport=sport, dport=udp_port) / Raw(b'\x64' * 2000)),
                          ('TCP', TCP(sport=sport, dport=tcp_port, flags='PA') / Raw(b'\x65' * 2000))]:
            if family == 4:
                frags = fragment(IP(src=peer, dst=dst, id=0x4242) / l4, fragsize=800)
            else:
                frags = fragment6(IPv6(src=peer, dst=dst) / IPv6ExtHdrFragment(id=0x4242) / l4, 900)
            for k, f in enumerate(frags):
                where = 'first' if k == 0 else 'last' if k == len(frags) - 1 else 'middle'
                add(prog, f'{tname}: {lname} fragment {where}', Ether(src=src_mac, dst=dst_mac) / f)
        if family == 6:
            jumbo = IPv6(src=peer, dst=dst, plen=0) / IPv6ExtHdrHopByHop(options=[Jumbo(jumboplen=8 + 8 + 100)]) / UDP(sport=sport, dport=udp_port) / Raw(b'j' * 100)
            add(prog, f'{tname}: jumbogram (payload length 0, jumbo option)', Ether(src=src_mac, dst=dst_mac) / jumbo)


# ---------------------------------------------------------------- xdp_lb
X = A['xdp']
V = X['vips']
targets4 = [('l2 VIP', V['l2']), ('ipip VIP', V['ipip']), ('ipopt VIP', V['ipopt']), ('snat VIP', V['snat']),
            ('not a VIP', X['nonVip4']), ('SNAT address', X['snatAddress'])]
targets6 = [('l2 VIP6', V['l2v6']), ('ipip VIP6', V['ipipv6']), ('not a VIP6', X['nonVip6']), ('node address6', X['lb6'])]
family_corpus('xdp', 4, X['client4'], targets4, X['clientMac'], X['lbMac'], 44000, X['tcpPort'], X['udpPort'], 4)
family_corpus('xdp', 6, X['client6'], targets6, X['clientMac'], X['lbMac'], 44000, X['tcpPort'], X['udpPort'], 2)
# the link layer on its own
E = Ether(src=X['clientMac'], dst=X['lbMac'])
add('xdp', 'ARP request (scapy defaults)', Ether(src=X['clientMac'], dst='ff:ff:ff:ff:ff:ff') / ARP(pdst=V['l2'], hwsrc=X['clientMac'], psrc=X['client4']))
add('xdp', 'ARP reply', E / ARP(op=2, psrc=X['client4'], pdst=X['snatAddress']))
add('xdp', 'gratuitous ARP in 802.1Q', Ether(src=X['clientMac'], dst='ff:ff:ff:ff:ff:ff') / Dot1Q(vlan=5) / ARP(op=1, psrc=V['l2'], pdst=V['l2']))
add('xdp', '802.3 LLC/SNAP', Dot3(src=X['clientMac'], dst=X['lbMac']) / LLC() / SNAP() / IP(src=X['client4'], dst=V['l2']) / TCP(dport=X['tcpPort']))
add('xdp', 'IP and TCP defaults', E / IP() / TCP())
add('xdp', 'IPv6 and UDP defaults', E / IPv6() / UDP())
for mac_name, mac in [('broadcast', 'ff:ff:ff:ff:ff:ff'), ('IPv4 multicast', '01:00:5e:01:02:03'), ('IPv6 multicast', '33:33:ff:00:00:10')]:
    add('xdp', f'TCP SYN to the l2 VIP through the {mac_name} MAC', Ether(src=X['clientMac'], dst=mac) / IP(src=X['client4'], dst=V['l2']) / TCP(dport=X['tcpPort']))
# the SNAT flow's return traffic: replies from the real and ICMP errors about it, from the real or a router
S = X['snat']
P = S['port']
ER = Ether(src=S['realMac'], dst=X['lbMac'])
snat_quote = IP(src=X['snatAddress'], dst=S['real']) / UDP(sport=P, dport=S['realPort']) / DNS(rd=1, qd=DNSQR(qname='example.org'))
snat_tcp_quote = IP(src=X['snatAddress'], dst=S['real']) / TCP(sport=P, dport=S['realPort'], options=TCP_ALL_OPTIONS)
replies = [
    ('DNS answer', UDP(sport=S['realPort'], dport=P) / DNS(id=1, qr=1, qd=DNSQR(qname='example.org'), an=DNSRR(rrname='example.org', rdata='192.0.2.53'))),
    ('UDP zero checksum', UDP(sport=S['realPort'], dport=P, chksum=0) / Raw(b'answer')),
    ('UDP full-size', UDP(sport=S['realPort'], dport=P) / Raw(b'\x66' * 1472)),
    ('TCP to the SNAT port (no such flow)', TCP(sport=S['realPort'], dport=P, flags='SA', options=TCP_ALL_OPTIONS)),
    ('UDP from another port', UDP(sport=S['realPort'] + 1, dport=P) / Raw(b'x')),
]
for vname, ip in ip_variants4(S['real'], X['snatAddress']):
    for lname, l4 in replies:
        add('xdp', f'SNAT reply: {vname}{lname}', ER / ip() / l4)
for vname, l2 in l2_variants(S['realMac'], X['lbMac'])[1:]:
    add('xdp', f'SNAT reply: {vname}DNS answer', l2() / IP(src=S['real'], dst=X['snatAddress']) / replies[0][1])
for k, f in enumerate(fragment(IP(src=S['real'], dst=X['snatAddress'], id=0x77) / UDP(sport=S['realPort'], dport=P) / Raw(b'\x67' * 1800), fragsize=600)):
    add('xdp', f'SNAT reply: fragment {k}', ER / f)
errors = [
    ('port unreachable, whole quote', ICMP(type=3, code=3) / snat_quote),
    ('port unreachable, quote of 8 bytes', ICMP(type=3, code=3) / Raw(bytes(snat_quote)[:28])),
    ('port unreachable, quote cut inside UDP', ICMP(type=3, code=3) / Raw(bytes(snat_quote)[:24])),
    ('frag needed', ICMP(type=3, code=4, nexthopmtu=1400) / snat_quote),
    ('time exceeded', ICMP(type=11, code=0) / snat_quote),
    ('parameter problem', ICMP(type=12, ptr=8) / snat_quote),
    ('unreachable quoting TCP with options', ICMP(type=3, code=1) / snat_tcp_quote),
    ('unreachable quoting TCP, 8 bytes', ICMP(type=3, code=1) / Raw(bytes(snat_tcp_quote)[:28])),
    ('unreachable quoting a header with IP options', ICMP(type=3, code=3) / IP(src=X['snatAddress'], dst=S['real'], options=[IPOption_RR(routers=['0.0.0.0'] * 2)]) / UDP(sport=P, dport=S['realPort']) / Raw(b'q')),
    ('unreachable quoting UDP without checksum', ICMP(type=3, code=3) / IP(src=X['snatAddress'], dst=S['real']) / UDP(sport=P, dport=S['realPort'], chksum=0) / Raw(b'q')),
    ('unreachable quoting a fragment', ICMP(type=3, code=3) / IP(src=X['snatAddress'], dst=S['real'], flags='MF') / UDP(sport=P, dport=S['realPort']) / Raw(b'q' * 16)),
    ('echo reply', ICMP(type=0, id=P, seq=1) / Raw(b'pong')),
    ('redirect', ICMP(type=5, code=1, gw='198.51.100.254') / snat_quote),
]
for who, src in [('from the real', S['real']), ('from a router', S['router'])]:
    for vname, ip in [('', lambda s=src: IP(src=s, dst=X['snatAddress'])),
                      ('IPv4 options ', lambda s=src: IP(src=s, dst=X['snatAddress'], options=[IPOption_Router_Alert()]))]:
        for ename, icmp in errors:
            add('xdp', f'SNAT ICMP {who}: {vname}{ename}', ER / ip() / icmp)
    add('xdp', f'SNAT ICMP {who}: 802.1Q port unreachable', Ether(src=S['realMac'], dst=X['lbMac']) / Dot1Q(vlan=5) / IP(src=src, dst=X['snatAddress']) / errors[0][1])

# ---------------------------------------------------------------- backend_ingress / backend_egress
B = A['backend']
b4, b6 = B['v4'], B['v6']
EB = Ether(src='02:00:00:00:00:01', dst='02:00:00:00:00:02')
ER2 = Ether(src='02:00:00:00:00:02', dst='02:00:00:00:00:01')
vp, tp = B['vipPort'], B['targetPort']


def inner_set(fam, vip, client, port):
    ip = (lambda: IP(src=client, dst=vip)) if fam == 4 else (lambda: IPv6(src=client, dst=vip))
    return [('TCP SYN every option', ip() / TCP(sport=45000, dport=port, options=TCP_ALL_OPTIONS)),
            ('TCP data', ip() / TCP(sport=45001, dport=port, flags='PA') / Raw(b'GET /')),
            ('UDP DNS', ip() / UDP(sport=45002, dport=port) / DNS(qd=DNSQR(qname='example.org'))),
            ('ICMP echo', ip() / (ICMP() if fam == 4 else ICMPv6EchoRequest())),
            ('full-size TCP', ip() / TCP(sport=45003, dport=port, flags='A') / Raw(b'\x68' * (1400 if fam == 4 else 1380))),
            ('SCTP', ip() / SCTP(sport=45004, dport=port) / SCTPChunkInit()),
            ('extension chain' if fam == 6 else 'IP options', (ip() / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / TCP(sport=45005, dport=port)) if fam == 6
             else IP(src=client, dst=vip, options=[IPOption_Router_Alert()]) / TCP(sport=45005, dport=port))]


for ofam, ob in [(4, b4), (6, b6)]:
    for ifam, ib in [(4, b4), (6, b6)]:
        outer = (lambda s=ob['lb'], d=ob['real']: IP(src=s, dst=d)) if ofam == 4 else (lambda s=ob['lb'], d=ob['real']: IPv6(src=s, dst=d))
        for vipname, vip in [('served VIP', ib['ipipVip']), ('unserved address', ib['stranger'])]:
            for iname, inner in inner_set(ifam, vip, ib['client'], vp):
                add('ingress', f'{ifam}in{ofam} to a {vipname}: {iname}', EB / outer() / inner)
        inner = inner_set(ifam, ib['ipipVip'], ib['client'], vp)[0][1]
        if ofam == 4:
            add('ingress', f'{ifam}in4 outer with IP options', EB / IP(src=ob['lb'], dst=ob['real'], options=[IPOption_Router_Alert()]) / inner)
            for k, f in enumerate(fragment(IP(src=ob['lb'], dst=ob['real'], proto=4 if ifam == 4 else 41) / Raw(bytes(inner) + b'\x69' * 1500), fragsize=800)):
                add('ingress', f'{ifam}in4 outer fragment {k}', EB / f)
            add('ingress', f'{ifam} in GRE over IPv4', EB / IP(src=ob['lb'], dst=ob['real']) / GRE() / inner)
        else:
            add('ingress', f'{ifam}in6 after a hop-by-hop header', EB / IPv6(src=ob['lb'], dst=ob['real']) / IPv6ExtHdrHopByHop() / inner)
            add('ingress', f'{ifam}in6 after a destination-options header', EB / IPv6(src=ob['lb'], dst=ob['real']) / IPv6ExtHdrDestOpt() / inner)
            for k, f in enumerate(fragment6(IPv6(src=ob['lb'], dst=ob['real']) / IPv6ExtHdrFragment(id=9) / Raw(bytes(inner) + b'\x69' * 1500), 900)):
                add('ingress', f'{ifam}in6 outer fragment {k}', EB / f)
        add('ingress', f'{ifam}in{ofam} from an unknown source', EB / (IP(src=ob['stranger'], dst=ob['real']) if ofam == 4 else IPv6(src=ob['stranger'], dst=ob['real'])) / inner)


def dsr4(vip, port):
    # the DSR option (type 0x9a: copied, class 0, number 26; length 8) as scapy's generic IPOption
    return IPOption(copy_flag=1, optclass=0, option=26, value=port.to_bytes(2, 'big') + inet_aton(vip))


def dsr6(vip, port):
    return IPv6ExtHdrDestOpt(options=[HBHOptUnknown(otype=0x1b, optdata=inet_pton(AF_INET6, vip) + port.to_bytes(2, 'big') + b'\x00\x00')])


flows = []  # (family, proto, client port): the ipopt requests whose replies egress then rewrites
for fam, b in [(4, b4), (6, b6)]:
    for k, (pname, l4f) in enumerate([('TCP SYN every option', lambda cp: TCP(sport=cp, dport=tp, options=TCP_ALL_OPTIONS)),
                                      ('TCP data', lambda cp: TCP(sport=cp, dport=tp, flags='PA') / Raw(b'hello')),
                                      ('UDP DNS', lambda cp: UDP(sport=cp, dport=tp) / DNS(qd=DNSQR(qname='example.org'))),
                                      ('UDP zero checksum', lambda cp: UDP(sport=cp, dport=tp, chksum=0) / Raw(b'z')),
                                      ('UDP full-size', lambda cp: UDP(sport=cp, dport=tp) / Raw(b'\x6a' * 1400))]):
        cp = 46000 + k
        if fam == 4:
            if pname != 'UDP zero checksum':
                flows.append((fam, pname, cp))
            base = lambda opts, l4=l4f(cp): IP(src=b['client'], dst=b['real'], options=opts) / l4
            add('ingress', f'ipopt4 {pname}', EB / base([dsr4(b['optVip'], vp)]))
            add('ingress', f'ipopt4 {pname}, then router alert', EB / base([dsr4(b['optVip'], vp), IPOption_Router_Alert()]))
            add('ingress', f'ipopt4 {pname}, after a NOP', EB / base([IPOption_NOP(), dsr4(b['optVip'], vp)]))
            add('ingress', f'ipopt4 {pname}, option names an unserved VIP', EB / base([dsr4(b['stranger'], vp)]))
            add('ingress', f'ipopt4 {pname}, option names another port', EB / base([dsr4(b['optVip'], vp + 1)]))
            add('ingress', f'ipopt4 {pname}, 802.1Q', EB / Dot1Q(vlan=5) / base([dsr4(b['optVip'], vp)]))
            for j, f in enumerate(fragment(base([dsr4(b['optVip'], vp)]) / Raw(b'\x6b' * 1600), fragsize=800)):
                add('ingress', f'ipopt4 {pname} fragment {j}', EB / f)
        else:
            if pname != 'UDP zero checksum':
                flows.append((fam, pname, cp))
            hdr = lambda: IPv6(src=b['client'], dst=b['real'])
            add('ingress', f'ipopt6 {pname}', EB / hdr() / dsr6(b['optVip'], vp) / l4f(cp))
            add('ingress', f'ipopt6 {pname}, after hop-by-hop', EB / hdr() / IPv6ExtHdrHopByHop() / dsr6(b['optVip'], vp) / l4f(cp))
            add('ingress', f'ipopt6 {pname}, then a routing header', EB / hdr() / dsr6(b['optVip'], vp) / IPv6ExtHdrRouting(addresses=[b['real']], segleft=0) / l4f(cp))
            add('ingress', f'ipopt6 {pname}, option names an unserved VIP', EB / hdr() / dsr6(b['stranger'], vp) / l4f(cp))
            add('ingress', f'ipopt6 {pname}, then a fragment header', EB / hdr() / dsr6(b['optVip'], vp) / IPv6ExtHdrFragment(id=3) / l4f(cp))
    # plain traffic to the real: the same transport and extension variety the LB meets
    for lname, l4 in l4_set(fam, b['real'], 47000, 22, 53, b['client']):
        for vname, ip in (ip_variants4 if fam == 4 else ip_variants6)(b['client'], b['real'])[:3]:
            add('ingress', f'plain{fam} {vname}{lname}', EB / ip() / l4)

# replies of the recorded flows and ICMP errors about them, as the real's stack sends them
for fam, pname, cp in flows:
    b = b6 if fam == 6 else b4
    ip = (lambda: IP(src=b['real'], dst=b['client'])) if fam == 4 else (lambda: IPv6(src=b['real'], dst=b['client']))
    req_ip = (lambda: IP(src=b['client'], dst=b['real'])) if fam == 4 else (lambda: IPv6(src=b['client'], dst=b['real']))
    if pname.startswith('TCP'):
        replies = [('SYN+ACK every option', TCP(sport=tp, dport=cp, flags='SA', options=TCP_ALL_OPTIONS)),
                   ('data', TCP(sport=tp, dport=cp, flags='PA') / Raw(b'HTTP/1.1 200 OK\r\n\r\n')),
                   ('full-size', TCP(sport=tp, dport=cp, flags='A') / Raw(b'\x6c' * (1460 if fam == 4 else 1440))),
                   ('RST', TCP(sport=tp, dport=cp, flags='R'))]
        quote = req_ip() / TCP(sport=cp, dport=tp, options=TCP_ALL_OPTIONS)
    else:
        replies = [('DNS answer', UDP(sport=tp, dport=cp) / DNS(qr=1, qd=DNSQR(qname='example.org'), an=DNSRR(rrname='example.org', rdata='192.0.2.1'))),
                   ('empty', UDP(sport=tp, dport=cp)),
                   ('full-size', UDP(sport=tp, dport=cp) / Raw(b'\x6d' * (1472 if fam == 4 else 1452)))]
        if fam == 4:
            replies.append(('zero checksum', UDP(sport=tp, dport=cp, chksum=0) / Raw(b'a')))
        quote = req_ip() / UDP(sport=cp, dport=tp) / Raw(b'request')
    for rname, l4 in replies:
        add('egress', f'reply{fam} {pname}: {rname}', ER2 / ip() / l4)
        if fam == 4:
            add('egress', f'reply4 {pname}: {rname} with IP options', ER2 / IP(src=b['real'], dst=b['client'], options=[IPOption_Router_Alert()]) / l4)
        else:
            add('egress', f'reply6 {pname}: {rname} after a destination-options header', ER2 / ip() / IPv6ExtHdrDestOpt() / l4)
    big = ip() / replies[0][1] / Raw(b'\x6e' * 2000)
    for j, f in enumerate(fragment(big, fragsize=800) if fam == 4 else fragment6(IPv6(src=b['real'], dst=b['client']) / IPv6ExtHdrFragment(id=4) / replies[0][1] / Raw(b'\x6e' * 2000), 900)):
        add('egress', f'reply{fam} {pname}: fragment {j}', ER2 / f)
    if fam == 4:
        errs = [('port unreachable', ICMP(type=3, code=3) / quote), ('frag needed', ICMP(type=3, code=4, nexthopmtu=1400) / quote),
                ('time exceeded', ICMP(type=11) / quote), ('parameter problem', ICMP(type=12, ptr=20) / quote),
                ('unreachable, 8-byte quote', ICMP(type=3, code=3) / Raw(bytes(quote)[:28])),
                ('unreachable, quote with IP options', ICMP(type=3, code=3) / IP(src=b['client'], dst=b['real'], options=[IPOption_Router_Alert()]) / quote.payload),
                ('redirect', ICMP(type=5, gw='198.51.100.254') / quote), ('echo reply', ICMP(type=0))]
    else:
        errs = [('unreachable', ICMPv6DestUnreach(code=4) / quote), ('too big', ICMPv6PacketTooBig(mtu=1280) / quote),
                ('time exceeded', ICMPv6TimeExceeded() / quote), ('parameter problem', ICMPv6ParamProblem(ptr=6) / quote),
                ('unreachable, quote with an extension header', ICMPv6DestUnreach() / IPv6(src=b['client'], dst=b['real']) / IPv6ExtHdrDestOpt() / quote.payload),
                ('echo reply', ICMPv6EchoReply())]
    for ename, icmp in errs:
        add('egress', f'ICMP{fam} from the real about {pname}: {ename}', ER2 / ip() / icmp)
        add('egress', f'ICMP{fam} from a router about {pname}: {ename}', ER2 / ((IP(src=b['router'], dst=b['client'])) if fam == 4 else IPv6(src=b['router'], dst=b['client'])) / icmp)

json.dump(out, sys.stdout)
