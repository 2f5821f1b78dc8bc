#include "cc.h"
