#include "flow_table.h"
