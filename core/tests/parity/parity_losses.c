/*
 * Parity driver for the 'losses' case: keel's half of parity_losses.py. The
 * configuration format, the steps and the report items are described in
 * nn_common.h, shared by the nn parity drivers.
 */
#include "nn_common.h"

int main(void)
{
    return pn_main("parity_losses");
}
