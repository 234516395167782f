#include "planner/sharding.h"
