#include "planner/cost_model.h"
