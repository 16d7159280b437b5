// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* hbctl: load, inspect and unload hbeat's BPF side (commands in hbctl.c, hbctl_show.c). */
#include "hbctl.h"

int main(int argc, char **argv)
{
	return hbctl_main(argc, argv);
}
