#include "secret.h"
