#include "planner/strategy.h"
