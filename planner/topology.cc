#include "planner/topology.h"
