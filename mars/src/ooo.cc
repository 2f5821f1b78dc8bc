#include "ooo.h"
