#include "timer_wheel.h"
