/* SPDX-License-Identifier: GPL-2.0 */
/* Where the packet path tells `gitlb capture` what it did (lb_capture.h): which counters it moved, which real it
 * chose, and the parsed frame before anything rewrites it. Only xdp_lb_capture.o (-DLB_CAPTURE) has them; in
 * xdp_lb.o, the program the daemon runs, they are empty and compile to nothing. */
#ifndef LB_CAPTURE_HOOKS_H
#define LB_CAPTURE_HOOKS_H

#ifdef LB_CAPTURE
#include "lb_capture.h"
#else
#define LB_CAP_REASON(bit)
#define LB_CAP_REAL(id)
#define LB_CAP_PACKET(ctx, p)
#define LB_CAP_SNAT_BASE 32
#endif

#endif
