#include "planner/unit_task.h"
