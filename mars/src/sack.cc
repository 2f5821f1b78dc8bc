#include "sack.h"
